// The perseus._core extension: wires the per-area registrations together.
#include "pybind11.hpp"

void register_pipeline(py::module_& m);
void register_problem(py::module_& m);
void register_switcher(py::module_& m);

PYBIND11_MODULE(_core, m) {
  m.doc() =
      "perseus compiled core: schedules, plan replay, the frontier solver and the frequency switcher";
  register_pipeline(m);
  register_problem(m);
  register_switcher(m);
}
