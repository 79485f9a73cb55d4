// A Python attribute looked up once per process. The object is never
// destroyed: releasing it after the interpreter has finalized would crash at
// exit. gil_safe_call_once_and_store also avoids the deadlock a plain function
// static can hit when the import releases the GIL.
#pragma once
#include <pybind11/gil_safe_call_once.h>
#include <pybind11/pybind11.h>

#define MK_PY_ATTR(MODULE, NAME)                                                                        \
  ([]() -> pybind11::object& {                                                                         \
    PYBIND11_CONSTINIT static pybind11::gil_safe_call_once_and_store<pybind11::object> storage;       \
    return storage                                                                                     \
        .call_once_and_store_result([] { return pybind11::object(pybind11::module_::import(MODULE).attr(NAME)); }) \
        .get_stored();                                                                                 \
  }())
