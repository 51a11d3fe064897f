/* The Python extension module the C kernels are built into at install (setup.py): an empty
 * module, so that pip's build backend compiles and installs this folder's sources like any
 * extension, loaded by ctypes (moeroof.kernels.loader) for its plain C functions, not through
 * Python's C API. mr_sources_hash is the hash of the sources it was built from (setup.py passes
 * it, moeroof.kernels.sources computes it): a library built from other sources (an editable
 * install whose C was edited since) is never used. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifndef MR_SOURCES_HASH
#error "MR_SOURCES_HASH: build through setup.py, which passes the sources' hash"
#endif

const char *mr_sources_hash(void) { return MR_SOURCES_HASH; }

static struct PyModuleDef mr_module = {
    PyModuleDef_HEAD_INIT, "_native",
    "The suite's C kernels (plain C functions, loaded with ctypes).", -1, NULL,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&mr_module); }
