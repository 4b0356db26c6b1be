// The perseus._core extension: wires the per-area registrations together.
#include "pybind11.hpp"

#include "switcher.hpp"

void register_pipeline(py::module_& m);
void register_problem(py::module_& m);
void register_switcher(py::module_& m);

PYBIND11_MODULE(_core, m) {
  m.doc() =
      "perseus compiled core: schedules, plan replay, the frontier solver and the frequency switcher";
  // The highest clock any part of perseus accepts (the profile's limits, the
  // switcher, the clock service and the Megatron options read this one).
  m.attr("MAX_CLOCK_MHZ") = perseus::kMaxClockMhz;
  register_pipeline(m);
  register_problem(m);
  register_switcher(m);
}
