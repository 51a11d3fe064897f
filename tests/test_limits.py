"""Bounds checked before allocating: named limits, available memory, archive members'
declared sizes, replicate counts, JSON/TOML nesting, overflowing unit conversions."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import moeroof.core.limits as limits
from moeroof.cli import main
from moeroof.core.errors import ParameterError
from moeroof.core.units import to_si
from moeroof.data.io import InputError, read_histogram, read_trace, sidecar_path, write_trace

TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "qwen3-30b-a3b-like.npz"
HIST = Path(__file__).resolve().parents[1] / "data" / "histograms" / "deepseek-v3-like.csv"


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


# ------------------------------------------------------------------ check_allocation


def test_check_allocation_names_the_product_and_its_size():
    with pytest.raises(ValueError, match=r"experts × layers = 1e\+12 entries would need 7.28 TiB; at most"):
        limits.check_allocation(10**12, 8, "experts × layers")
    with pytest.raises(ParameterError) as info:
        limits.check_allocation(10**12, 8, "replicates", parameter="bootstrap")
    assert info.value.parameter == "bootstrap"
    # products are Python ints: nothing overflows, however large
    with pytest.raises(ValueError, match="about 2"):
        limits.check_allocation(2**2000, 8, "x")
    assert limits.check_allocation(1000, 8, "small") == 8000


def test_check_allocation_against_available_memory(monkeypatch):
    monkeypatch.setattr(limits, "available_memory", lambda: 1 << 20)
    limits.check_allocation(1 << 17, 8, "fits")  # exactly 1 MiB
    with pytest.raises(ValueError, match=r"tokens × K = 131073 entries would need 1 MiB; this machine has 1 MiB"):
        limits.check_allocation((1 << 17) + 1, 8, "tokens × K")


def test_available_memory_is_positive_and_sees_meminfo():
    avail = limits.available_memory()
    assert avail > 0
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        line = next(x for x in meminfo.read_text().splitlines() if x.startswith("MemAvailable:"))
        # within a factor of two of the kernel's figure read here (memory moves between reads)
        assert avail <= 2 * int(line.split()[1]) * 1024


def test_human_bytes():
    assert limits.human_bytes(512) == "512 B"
    assert limits.human_bytes(8 * 2**40) == "8 TiB"
    assert limits.human_bytes(4.47 * 2**30) == "4.47 GiB"


# ------------------------------------------------------------------ sidecars


def _histogram(tmp_path: Path, side: dict, rows: str = "layer,expert,count\n0,0,4\n") -> Path:
    path = tmp_path / "h.csv"
    path.write_text(rows)
    meta = {"model": "x", "source": "t", "layers_summed": False}
    meta.update(side)
    sidecar_path(path).write_text(json.dumps(meta))
    return path


def test_tokens_2_62_is_bounded_in_python_ints(tmp_path, capsys):
    # once rejected with an overflowed K·T product (and a numpy overflow warning)
    path = _histogram(tmp_path, {"experts": 8, "top_k": 2, "layers": 1, "tokens": 2**62})
    with pytest.raises(
        InputError,
        match=r"tokens: routed tokens per layer must be at most 2\^40 = 1099511627776, got 4611686018427387904",
    ):
        read_histogram(path)
    assert main(["union", str(path), "--batch", "1"]) == 2
    assert "overflow" not in capsys.readouterr().err


def test_experts_and_layers_bounded_before_allocating(tmp_path):
    path = _histogram(tmp_path, {"experts": 10**12, "top_k": 2, "layers": 10**6, "tokens": 4})
    with pytest.raises(InputError, match="experts E=1000000000000 is more than the 1048576"):
        read_histogram(path)
    path = _histogram(tmp_path, {"experts": 2**20, "top_k": 2, "layers": 60000, "tokens": 4})
    with pytest.raises(InputError, match=r"experts: experts × layers = 6.29e\+10 entries would need 469 GiB"):
        read_histogram(path)


def test_deeply_nested_sidecar_is_refused_before_parsing(tmp_path, capsys):
    # json.loads on a 10^6-deep list raises RecursionError
    path = tmp_path / "h.csv"
    path.write_text("layer,expert,count\n")
    sidecar_path(path).write_text("[" * 1_000_000 + "]" * 1_000_000)
    with pytest.raises(InputError, match="nests arrays or tables 1000000 deep, more than the 32 allowed"):
        read_histogram(path)
    assert main(["union", str(path), "--batch", "1"]) == 2
    assert "nests arrays" in one_error_line(capsys)


def test_oversized_sidecar_is_refused(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("layer,expert,count\n")
    sidecar_path(path).write_text('{"pad": "' + "x" * (limits.MAX_JSON_BYTES + 10) + '"}')
    with pytest.raises(InputError, match="more than the 16 MiB allowed"):
        read_histogram(path)


def test_nesting_depth_ignores_strings_and_comments():
    assert limits.nesting_depth('{"a": "[[[[[", "b": [1, [2]]}') == 3
    assert limits.nesting_depth('"\\"[[["') == 0
    assert limits.nesting_depth("a = [1] # [[[[\nb = '[[['\n[t]\n", toml=True) == 1


def _tables_deep(value) -> int:
    """Containers below the top of a parsed TOML document, along its deepest path."""
    if isinstance(value, dict):
        return 1 + max((_tables_deep(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_tables_deep(v) for v in value), default=0)
    return 0


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(
        st.tuples(
            st.sampled_from(["key", "header", "inline", "array", "string"]),
            st.lists(st.sampled_from(["a", "b", '"c.d"', "'e.f'"]), min_size=1, max_size=6),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_toml_nesting_depth_bounds_what_tomllib_builds(lines):
    # a dotted key nests tables as brackets do (a 500,000-dot key took tomllib minutes, unmeasured),
    # and keys after a [header] sit below its table: the scan's depth is at least the parsed
    # document's and at most two more
    import tomllib

    text = []
    for i, (kind, parts) in enumerate(lines):
        key = ".".join([f"k{i}", *parts])
        if kind == "header":
            text.append(f"[{key}]\nx = 1.5 # a.b.c [[\n")
        elif kind == "inline":
            text.append(f"t{i} = {{ {key} = 1, y.z = '[.' }}\n")
        elif kind == "array":
            text.append(f'{key} = [\n  1.5,\n  [2.5, "a.b"],\n]\n')
        else:
            text.append(f'{key} = "x.y.z [["\n' if kind == "string" else f"{key} = 1.25\n")
    doc = "".join(text)
    try:
        parsed = tomllib.loads(doc)
    except tomllib.TOMLDecodeError:
        return  # a key given twice ("c.d" and c.d are other keys, but a.a may repeat): not a document
    depth = limits.nesting_depth(doc, toml=True)
    assert _tables_deep(parsed) - 1 <= depth <= _tables_deep(parsed) + 2


def test_a_toml_key_of_half_a_million_dots_is_refused_at_once(tmp_path, capsys):
    deep = tmp_path / "deep.toml"
    deep.write_text("a" + ".a" * 500_000 + " = 1\n")
    assert main(["plan", "--model", str(deep), "--hardware", "nvme-gen4", "--batch", "1"]) == 2
    assert "nests arrays or tables 500001 deep, more than the 32 allowed" in one_error_line(capsys)


# ------------------------------------------------------------------ .npz members


def _write_member(zf: zipfile.ZipFile, name: str, header_shape: tuple, dtype: str, data_chunks) -> None:
    with zf.open(name, "w", force_zip64=True) as fh:
        np.lib.format.write_array_header_1_0(
            fh, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": header_shape}
        )
        for chunk in data_chunks:
            fh.write(chunk)


def _meta_member(zf: zipfile.ZipFile) -> None:
    meta = np.array(json.dumps({"experts": 8, "top_k": 2, "model": "x", "source": "t"}))
    with zf.open("meta.npy", "w") as fh:
        np.lib.format.write_array(fh, meta)


def test_npz_member_header_larger_than_its_data_is_refused(tmp_path, capsys):
    # a crafted header asking for 512 TiB over 64 bytes of data
    path = tmp_path / "crafted.npz"
    with zipfile.ZipFile(path, "w") as zf:
        _write_member(zf, "topk.npy", (2**20, 2**20, 64, 8), "|i1", [bytes(64)])
        _meta_member(zf)
    with pytest.raises(
        InputError,
        match=r"topk: the header declares shape \(1048576, 1048576, 64, 8\) of int8 \(512 TiB\) but the archive member holds 64 B",
    ):
        read_trace(path)
    assert main(["union", str(path), "--batch", "1"]) == 2
    assert "512 TiB" in one_error_line(capsys)


def test_npz_zip_bomb_is_refused_before_inflating(tmp_path):
    # 80 MiB of zeros deflate to ~80 KB: a ratio near 1000
    path = tmp_path / "bomb.npz"
    n = 80 << 20
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        _write_member(zf, "topk.npy", (n // 16, 1, 1, 2), "<i8", (bytes(1 << 20) for _ in range(80)))
        _meta_member(zf)
    assert path.stat().st_size < 1 << 20
    with pytest.raises(InputError, match=r"topk: inflates from .* to 80 MiB, more than 100× \(refused as a zip bomb\)"):
        read_trace(path)


def test_npz_member_larger_than_memory_is_refused(monkeypatch):
    monkeypatch.setattr(limits, "available_memory", lambda: 1 << 20)
    with pytest.raises(
        InputError,
        match=r"topk: topk \(96 × 16 × 48 × 8\) = 589824 entries would need 1.12 MiB; this machine has 1 MiB",
    ):
        read_trace(TRACE)


def test_embedded_trace_still_reads():
    tr = read_trace(TRACE)
    assert tr.topk.shape == (96, 16, 48, 8)


# ------------------------------------------------------------------ replicate flags


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["union", str(HIST), "--batch", "1", "--bootstrap", "900000"], "--bootstrap"),
        (["union", str(TRACE), "--batch", "1,8", "--draws", "900000"], "--draws"),
        (["union", str(TRACE), "--batch", "1", "--bootstrap", "1000001"], "--bootstrap"),
        (["fit", str(HIST), "--gof-sims", "1000000"], "--gof-sims"),
        (["fit", str(HIST), "--bootstrap", "1000000"], "--bootstrap"),
    ],
)
def test_replicate_flags_go_through_the_memory_check(capsys, monkeypatch, argv, flag):
    monkeypatch.setattr(limits, "available_memory", lambda: 1 << 30)
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"error: {flag}: ")
    assert "would need" in line or "more than the 1000000 allowed" in line


# ------------------------------------------------------------------ units


def test_to_si_refuses_an_overflowing_conversion():
    with pytest.raises(ValueError, match=r"1e\+300 GiB overflows"):
        to_si(1e300, "GiB")
    with pytest.raises(ValueError, match=r"1e\+300 GiB overflows"):
        to_si([1.0, 1e300], "GiB")
    assert to_si(1e300, "B") == 1e300


@pytest.mark.parametrize(
    "argv,message",
    [
        (
            ["plan", "--model", "glm-5.2", "--hardware", "nvme-gen4", "--batch", "1", "--cache-gib", "1e300"],
            "--cache-gib: 1e+300 GiB is too large",
        ),
        (
            ["plan", "--model", "glm-5.2", "--hardware", "nvme-gen4", "--batch", "1", "--read-size-kib", "1e-320"],
            "--read-size-kib: a read of",
        ),
        (
            ["cache", str(TRACE), "--policy", "lru", "--capacity-gib", "1e300", "--expert-bytes", "1"],
            "--capacity-gib: 1e+300 GiB is too large",
        ),
        (
            ["fit-routing", "x.points", "--experts", "64", "--top-k", "4", "--layers", "8", "--expert-bytes", "1e-300"],
            "--expert-bytes: a size in bytes must be at least 1",
        ),
    ],
)
def test_overflowing_sizes_on_the_command_line(capsys, argv, message):
    # --cache-gib 1e300 once planned with an infinite cache (exit 0)
    assert main(argv) == 2
    assert message in one_error_line(capsys)


# ------------------------------------------------------------------ presets


def _copy_presets(tmp_path: Path, monkeypatch) -> Path:
    import moeroof.data.presets as presets

    root = tmp_path / "presets"
    shutil.copytree(presets.PRESETS_DIR, root)
    monkeypatch.setattr(presets, "PRESETS_DIR", root)
    return root


@pytest.mark.parametrize(
    "text,message",
    [
        ("kind = [", "not valid TOML"),
        ('kind = "model"\nx = ' + "[" * 5000 + "]" * 5000 + "\n", "nests arrays or tables 5000 deep"),
        ("", 'kind: must be "model"'),
    ],
)
def test_a_broken_preset_does_not_break_the_others(tmp_path, monkeypatch, capsys, text, message):
    from moeroof.cli.presets import presets_report
    from moeroof.data.presets import list_presets

    root = _copy_presets(tmp_path, monkeypatch)
    (root / "models" / "broken.toml").write_text(text)
    assert "broken" in list_presets()["models"] and "glm-5.2" in list_presets()["models"]
    rep = presets_report()
    assert "glm-5.2" in rep["models"] and "broken" not in rep["models"]
    assert message in rep["broken"]["models/broken"]
    assert main(["presets"]) == 2
    out, err = capsys.readouterr()
    assert "glm-5.2" in out and "broken" not in out
    assert err.startswith(f"error: {root / 'models' / 'broken.toml'}:-: ") and message in err


def test_preset_with_huge_numbers_is_refused(tmp_path):
    from moeroof.data.presets import load_model

    src = Path(__file__).resolve().parents[1] / "data" / "presets" / "models" / "glm-5.2.toml"
    text = src.read_text()
    path = tmp_path / "m.toml"
    import re

    path.write_text(re.sub(r"experts = \{ value = 256", "experts = { value = " + "9" * 400, text, count=1))
    with pytest.raises(InputError, match="experts: value must be finite"):
        load_model(path)
    path.write_text(re.sub(r"experts = \{ value = 256", "experts = { value = 2000000", text, count=1))
    with pytest.raises(InputError, match=r"m\.toml:7: experts: 2000000 is more than the 2\^20 a preset's experts"):
        load_model(path)


def test_union_uniform_and_trace_sizes_are_bounded(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(limits, "available_memory", lambda: 1 << 30)
    # beyond the named limits, the flag's declaration refuses the value as it is parsed
    assert main(["union", "--uniform", "256", "8", "--batch", "1", "--layers", "100000000000"]) == 2
    assert one_error_line(capsys) == "error: --layers: 100000000000 is more than the 65536 allowed"
    # within them, the arrays they ask for are checked against the memory available
    assert main(["union", "--uniform", "256", "8", "--batch", "1:10000:+1", "--layers", "65536"]) == 2
    assert one_error_line(capsys).startswith("error: --layers: 65536 × batch sizes × 4")
    out = tmp_path / "t.npz"
    argv = ["trace", "--family", "zipf:0.9", "--steps", "2", "--top-k", "2", "--layers", "8", "-o", str(out)]
    assert main([*argv, "--streams", "4", "--experts", "1000000000"]) == 2
    assert one_error_line(capsys) == "error: --experts: 1000000000 is more than the 1048576 allowed"
    assert main([*argv, "--streams", "64", "--experts", "1048576"]) == 2
    assert one_error_line(capsys).startswith("error: --experts: 4 × 64 streams × 8 layers × 1048576 experts")
    assert not out.exists()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flag=st.sampled_from(["--streams", "--steps", "--prompt-tokens"]), power=st.integers(31, 62))
def test_trace_names_the_flag_whose_size_is_past_memory(tmp_path, flag, power):
    """``trace`` with one of --streams, --steps or --prompt-tokens at 2^31 … 2^62 (the others
    small) is refused naming that flag: ``--streams 2^40`` was said as ``--experts: 8 × 4 × streams
    × layers …`` and ``--prompt-tokens 2^40`` as ``--steps``."""
    sizes = {"--streams": "2", "--steps": "4", "--prompt-tokens": "0", flag: str(1 << power)}
    out = tmp_path / "t.npz"
    argv = ["trace", "--family", "uniform", "--experts", "8", "--top-k", "2", "--layers", "2", "-o", str(out)]
    code, _, err = run_cli([*argv, *(x for kv in sizes.items() for x in kv)])
    assert code == 2 and err.startswith(f"error: {flag}: "), err
    assert not out.exists()


def test_points_files_are_bounded(tmp_path, capsys):
    """A POINTS file is simulated row by row: more rows than MAX_POINTS_ROWS, or a file larger than
    MAX_POINTS_BYTES, is refused before anything runs (fit-routing and fit-plan readers alike)."""
    from moeroof.data.plan_points import read_plan_points
    from moeroof.data.points import read_points

    many = tmp_path / "many.points"
    many.write_text("kind,batch,value\n" + "union,1,8\n" * (limits.MAX_POINTS_ROWS + 1))
    with pytest.raises(InputError, match=f"{limits.MAX_POINTS_ROWS + 1} rows, more than"):
        read_points(many, experts=64)
    plan = tmp_path / "many.csv"
    plan.write_text("batch,cache_gib,net_tok_s\n" + "1,4,0.5\n" * (limits.MAX_POINTS_ROWS + 1))
    with pytest.raises(InputError, match="rows, more than"):
        read_plan_points(plan)
    big = tmp_path / "big.points"
    big.write_text("# " + "x" * limits.MAX_POINTS_BYTES + "\nkind,batch,value\nunion,1,8\n")
    with pytest.raises(InputError, match="MiB a POINTS file may be"):
        read_points(big, experts=64)


def test_routing_knobs_json_is_bounded_and_an_object(tmp_path, capsys):
    pts = tmp_path / "p.csv"
    pts.write_text("batch,cache_gib,net_tok_s\n1,4,0.5\n")
    knobs = tmp_path / "knobs.json"
    args = ["fit-plan", str(pts), "--model", "glm-5.2", "--hardware", "nvme-gen4", "--routing-knobs", str(knobs)]
    for text, words in (("[" * 100_000 + "]" * 100_000, "deep"), ("[1, 2]", "expected a JSON object")):
        knobs.write_text(text)
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.count("error:") == 1 and words in err and "Traceback" not in err


HUGE = "1" + "0" * 5000  # past Python's 4,300-digit conversion limit
META = {"model": "x", "source": "t", "layers_summed": False}


def _huge_inputs(tmp_path):
    """(argv, what the one error line must hold) for a 5,001-digit number in each kind of input."""
    hist = tmp_path / "h.csv"
    hist.write_text(f"layer,expert,count\n0,0,{HUGE}\n")
    sidecar_path(hist).write_text(json.dumps({**META, "experts": 8, "top_k": 2, "layers": 1, "tokens": 4}))
    side = tmp_path / "s.csv"
    side.write_text("layer,expert,count\n0,0,4\n")
    sidecar_path(side).write_text(
        json.dumps({**META, "experts": 8, "top_k": 2, "layers": 1, "tokens": 4}).replace("8", HUGE, 1)
    )
    model = tmp_path / "m.toml"
    model.write_text(f'kind = "model"\nexperts = {{value = {HUGE}}}\n')
    knobs = tmp_path / "k.json"
    knobs.write_text(f'{{"knobs": {{"rho": {HUGE}}}}}')
    plan = ["plan", "--hardware", "nvme-gen4", "--batch", "1"]
    return [
        (["union", str(hist), "--batch", "2"], f"{hist}:2: count: a number of 5001 digits"),
        (["union", str(side), "--batch", "2"], f"{sidecar_path(side)}:-: experts: a number of 5001 digits"),
        ([*plan, "--model", str(model)], f"{model}:2: experts: a number of 5001 digits"),
        ([*plan, "--model", "glm-5.2", "--routing-knobs", str(knobs)], f"{knobs}: knobs.rho: a number of 5001 digits"),
    ]


def test_a_number_of_thousands_of_digits_is_refused_naming_its_file(tmp_path, capsys):
    # it was Python's "Exceeds the limit (4300 digits) for integer string conversion …", no file;
    # then the file without the key (`file`, `toml`): now the key, and a TOML's line
    for argv, words in _huge_inputs(tmp_path):
        assert main(argv) == 2, argv
        line = one_error_line(capsys)
        assert words in line and "set_int_max_str_digits" not in line, line
        assert len(line) < 400


def test_bounded_int_and_the_plain_words_for_pythons_limit():
    assert limits.bounded_int("-" + "9" * limits.MAX_INT_DIGITS) == -int("9" * limits.MAX_INT_DIGITS)
    with pytest.raises(ValueError, match="a number of 21 digits"):
        limits.bounded_int("1" * 21)
    with pytest.raises(ValueError) as exc:
        int(HUGE)
    assert limits.plain_value_error(exc.value).startswith("a number of more than 4,300 digits")
    assert limits.plain_value_error(ValueError("other")) == "other"


def test_an_error_quoting_a_huge_cell_stays_a_short_line(tmp_path):
    err = InputError(tmp_path / "p.csv", 2, "batch", f"must be finite, got {HUGE!r}")
    text = str(err)
    assert len(text) < 400 and "(4863 characters left out)" in text
    assert text.startswith(f"{tmp_path / 'p.csv'}:2: batch: must be finite, got '1000") and text.endswith("000'")


def test_a_small_trace_declaring_a_million_experts_is_not_fitted(tmp_path, capsys):
    # 16 KB of ids with a sidecar saying E = 2^20 grew `fit` to 12 GB over a minute (the skew
    # fit tabulates inclusion probabilities over every expert); refused before anything is counted
    from moeroof.fit.skew import check_fit_experts, fit_histogram

    rng = np.random.default_rng(0)
    path = tmp_path / "t.npy"
    np.save(path, rng.integers(0, 1 << 20, size=(64, 2, 4, 8)).astype(np.int32))
    sidecar_path(path).write_text(json.dumps({**META, "experts": 1 << 20, "top_k": 8}))
    assert main(["fit", str(path), "--bootstrap", "2", "--gof-sims", "2"]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"error: {path}:-: experts: E = 1048576 experts") and "at most 16384" in line
    check_fit_experts(limits.MAX_SKEW_FIT_EXPERTS)  # the bound itself is fitted
    with pytest.raises(ValueError, match="takes at most 16384"):
        fit_histogram(np.ones((1, limits.MAX_SKEW_FIT_EXPERTS + 1), dtype=np.int64), 1, rng=rng)


@pytest.mark.slow
def test_a_tiny_histogram_declaring_many_experts_unions_in_bounded_memory(tmp_path):
    # a 40-byte histogram whose sidecar says E = 2^20 grew `union` to 12 GB: 200 bootstrap
    # replicates of E counts drawn at once, and rarefaction's temporaries of each
    import resource
    import subprocess
    import sys

    path = tmp_path / "h.csv"
    path.write_text("layer,expert,count\n" + "".join(f"0,{i},1\n" for i in range(8)))
    sidecar_path(path).write_text(json.dumps({**META, "experts": 1 << 18, "top_k": 8, "layers": 1, "tokens": 1}))

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))

    done = subprocess.run(
        [sys.executable, "-m", "moeroof.cli", "union", str(path), "--batch", "2", "--json"],
        capture_output=True,
        text=True,
        preexec_fn=cap,  # noqa: PLW1509 - no threads start before the exec
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["experts"] == 1 << 18


@pytest.mark.slow
def test_a_small_parquet_of_one_repeated_value_is_refused_under_a_memory_cap(tmp_path):
    # a few hundred kilobytes of Parquet declaring 20M rows of one value grew `import table` to
    # 3.3 GiB before it found the second token for one cell; under a 2 GiB address-space cap the
    # footer's row count is refused before a row is read
    import resource
    import subprocess
    import sys

    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    src = tmp_path / "same.parquet"
    zeros = pa.array(np.zeros(20_000_000, dtype=np.int64))
    pq.write_table(pa.table({"s": zeros, "t": zeros, "e": zeros}), src, compression="zstd")
    del zeros
    assert src.stat().st_size < 1 << 20

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    argv = ["import", "table", str(src), "-o", str(tmp_path / "t.npz"), "--columns", "stream=s,step=t"]
    done = subprocess.run(
        [sys.executable, "-m", "moeroof.cli", *argv, "--expert-cols", "e", "--experts", "8", "--top-k", "1"],
        capture_output=True,
        text=True,
        preexec_fn=cap,  # noqa: PLW1509 - no threads start before the exec
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {src}:-: rows: 20,000,000 rows × 3 columns"), err
    assert not (tmp_path / "t.npz").exists()


@given(
    key=st.sampled_from(["experts", "top_k", "model", "family", "x"]),
    first=st.integers(min_value=1, max_value=64),
    second=st.integers(min_value=1, max_value=64),
    depth=st.integers(min_value=0, max_value=3),
)
@settings(max_examples=25, deadline=None)
def test_a_json_key_given_twice_is_refused_at_any_depth(key, first, second, depth):
    """``json`` keeps the last of two equal keys without a word; every JSON the suite reads goes
    through :func:`limits.unique_keys`, whose refusal names the key, at any depth and whether or
    not the two values agree (the file says one thing twice, or two things)."""
    inner = f'{{"{key}": {first}, "other": 1, "{key}": {second}}}'
    text = "[" * depth + inner + "]" * depth
    with pytest.raises(ValueError, match=rf"the key '{key}' is given twice in one object"):
        json.loads(text, object_pairs_hook=limits.unique_keys)
    assert json.loads(text.replace(f', "{key}": {second}', ""), object_pairs_hook=limits.unique_keys)


def test_a_sidecar_routing_knobs_and_parquet_meta_with_a_key_twice_are_refused(tmp_path, capsys):
    """The readers of a sidecar, ``--routing-knobs`` and a Parquet trace's meta name the file and
    the key given twice (each took the last value silently)."""
    import pyarrow.parquet as pq

    from moeroof.data.trace_parquet import META_KEY, write_parquet_trace

    hist = tmp_path / "h.csv"
    hist.write_text("layer,expert,count\n0,0,4\n0,1,3\n")
    side = json.dumps({**META, "experts": 8, "top_k": 2, "layers": 1, "tokens": 4, "provenance": "witnessed"})
    sidecar_path(hist).write_text(side[:-1] + ', "experts": 16}')
    assert main(["union", str(hist), "--batch", "2"]) == 2
    assert f"{hist.with_suffix('.json')}:-: file: the key 'experts' is given twice" in one_error_line(capsys)

    knobs = tmp_path / "knobs.json"
    knobs.write_text('{"family": "zipf", "skew": 0.8, "family": "dirichlet"}')
    pts = tmp_path / "p.csv"
    pts.write_text("batch,cache_gib,net_tok_s\n1,4,0.5\n")
    args = ["fit-plan", str(pts), "--model", "glm-5.2", "--hardware", "nvme-gen4", "--routing-knobs", str(knobs)]
    assert main(args) == 2
    assert f"{knobs}: the key 'family' is given twice" in one_error_line(capsys)

    trace = read_trace(TRACE)
    good = write_parquet_trace(tmp_path / "t.parquet", trace.topk, trace.meta)
    table = pq.read_table(good)
    meta = table.schema.metadata[META_KEY].decode()
    twice = tmp_path / "twice.parquet"
    pq.write_table(table.replace_schema_metadata({META_KEY: (meta[:-1] + ', "top_k": 2}').encode()}), twice)
    assert main(["mrc", str(twice)]) == 2
    assert f"{twice}:-: meta: " in (err := one_error_line(capsys)) and "the key 'top_k' is given twice" in err


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """The CLI in this process: exit status, stdout, stderr."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    layers=st.integers(1, 512),
    experts_log2=st.integers(10, 20),
    suffix=st.sampled_from([".npz", ".npy"]),
    command=st.sampled_from(["union", "histogram", "cache", "mrc", "fit"]),
)
def test_a_trace_whose_key_space_is_past_memory_is_refused_as_it_is_read(
    tmp_path_factory, monkeypatch, layers, experts_log2, suffix, command
):
    """A trace's (layers × experts) key space, at what its heaviest reader pays a key
    (``TRACE_KEY_BYTES``), is checked against available memory when the trace is read, naming the
    file and ``experts``: a 1 KB trace of 65,536 layers declaring 2^20 experts had ``histogram`` and
    ``union`` ask numpy for 512 GiB ('Unable to allocate …', no file named). Here the machine is made
    to have a little less than the trace's key space needs."""
    d = tmp_path_factory.mktemp("t")
    experts = 1 << experts_log2
    topk = np.zeros((2, 1, layers, 1), dtype=np.int32)
    topk[1] = 1
    meta = {"model": "m", "experts": experts, "top_k": 1, "source": "test", "provenance": "synthetic"}
    path = d / f"t{suffix}"
    write_trace(path, topk, meta)
    need = layers * experts * limits.TRACE_KEY_BYTES
    with monkeypatch.context() as patch:
        patch.setattr(limits, "available_memory", lambda: need - 1)
        _refused_naming_experts(path, suffix, command, d)
        patch.setattr(limits, "available_memory", lambda: need)
        assert read_trace(path).experts == experts  # just enough: read


def _refused_naming_experts(path: Path, suffix: str, command: str, d: Path) -> None:
    """read_trace and ``command`` on ``path`` refuse it naming its meta's file and ``experts``."""
    meta_file = path if suffix == ".npz" else sidecar_path(path)
    with pytest.raises(InputError, match=r"experts × layers = .* this machine has") as info:
        read_trace(path)
    assert info.value.path == meta_file and info.value.field == "experts"
    argv = {
        "union": ["union", str(path), "--batch", "1"],
        "histogram": ["histogram", str(path), "-o", str(d / "h.csv")],
        "cache": ["cache", str(path), "--policy", "lru", "--capacity-experts", "4"],
        "mrc": ["mrc", str(path)],
        "fit": ["fit", str(path)],
    }[command]
    code, _, err = run_cli(argv)
    assert code == 2 and err.startswith(f"error: {meta_file}:-: experts: experts × layers"), err
    assert not (d / "h.csv").exists()
