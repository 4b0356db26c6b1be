// Included first by every binding file: pybind11 with numpy support, the
// `py` namespace alias and the `_a` argument literals.
#pragma once

#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

namespace py = pybind11;
using namespace pybind11::literals;  // NOLINT: "name"_a keyword arguments

// Moves a vector into a numpy array without copying (the array owns it).
template <typename T>
py::array_t<T> to_numpy(std::vector<T>&& values, std::vector<py::ssize_t> shape = {}) {
  auto* owned = new std::vector<T>(std::move(values));
  py::capsule free_when_done(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  if (shape.empty()) shape.push_back(static_cast<py::ssize_t>(owned->size()));
  return py::array_t<T>(shape, owned->data(), free_when_done);
}
