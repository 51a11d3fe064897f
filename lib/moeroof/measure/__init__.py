"""moeroof.measure: what measures this machine — :mod:`~moeroof.measure.calibrate` (``moeroof
calibrate``: disk, memory and compute rates into a hardware preset), :mod:`~moeroof.measure.bench`
(``moeroof bench``: a synthetic MoE stack's decode steps timed), :mod:`~moeroof.measure.capture`
(``moeroof capture``: routing recorded from a local checkpoint) and
:mod:`~moeroof.measure.hf_block` (a Hugging Face MoE block timed against the roofline)."""
