// Bindings for pipeline schedules (cpp/pipeline.hpp).
#include "pybind11.hpp"

#include "dag.hpp"
#include "options.hpp"
#include "pipeline.hpp"

using perseus::Index;
using perseus::Instruction;
using perseus::Pipeline;

namespace {

template <typename T, typename Field>
py::array_t<T> column(const Pipeline& p, Field field) {
  std::vector<T> out;
  out.reserve(static_cast<std::size_t>(p.size()));
  for (const auto& c : p.computations()) out.push_back(static_cast<T>(field(c)));
  return to_numpy(std::move(out));
}

}  // namespace

void register_pipeline(py::module_& m) {
  py::tuple schedules(perseus::kScheduleKinds.size());
  for (std::size_t k = 0; k < perseus::kScheduleKinds.size(); ++k)
    schedules[k] = perseus::schedule_name(perseus::kScheduleKinds[k]);
  m.attr("SCHEDULES") = schedules;
  m.def(
      "check_schedule",
      [](const std::string& schedule, Index num_gpus, Index virtual_stages, Index microbatches) {
        perseus::check_schedule(perseus::parse_schedule(schedule), num_gpus, virtual_stages,
                                microbatches);
      },
      "schedule"_a, "num_gpus"_a, "virtual_stages"_a, "microbatches"_a,
      "Raise ValueError, naming the argument, unless the schedule can run these sizes.");
  py::class_<Pipeline>(m, "Pipeline",
                       "The computations of one training iteration and each GPU's order.")
      .def(py::init([](const std::string& schedule, Index num_gpus, Index virtual_stages,
                       Index microbatches) {
             Pipeline pipeline(perseus::parse_schedule(schedule), num_gpus, virtual_stages,
                               microbatches);
             perseus::check_deadlock_free(pipeline);
             return pipeline;
           }),
           "schedule"_a, "num_gpus"_a, "virtual_stages"_a, "microbatches"_a)
      .def_property_readonly("schedule",
                             [](const Pipeline& p) { return perseus::schedule_name(p.kind()); })
      .def_property_readonly("num_gpus", &Pipeline::num_gpus)
      .def_property_readonly("virtual_stages", &Pipeline::virtual_stages)
      .def_property_readonly("num_stages", &Pipeline::num_stages)
      .def_property_readonly("microbatches", &Pipeline::num_microbatches)
      .def("__len__", &Pipeline::size)
      .def_property_readonly(
          "stage",
          [](const Pipeline& p) { return column<std::int32_t>(p, [](auto& c) { return c.stage; }); })
      .def_property_readonly(
          "gpu",
          [](const Pipeline& p) { return column<std::int32_t>(p, [](auto& c) { return c.gpu; }); })
      .def_property_readonly(
          "chunk",
          [](const Pipeline& p) { return column<std::int32_t>(p, [](auto& c) { return c.chunk; }); })
      .def_property_readonly("microbatch",
                             [](const Pipeline& p) {
                               return column<std::int32_t>(p, [](auto& c) { return c.microbatch; });
                             })
      .def_property_readonly("instruction",
                             [](const Pipeline& p) {
                               return column<std::uint8_t>(
                                   p, [](auto& c) { return static_cast<int>(c.instruction); });
                             })
      .def_property_readonly("group",
                             [](const Pipeline& p) {
                               return column<std::int32_t>(
                                   p, [](auto& c) { return perseus::group_of(c).value(); });
                             })
      .def(
          "ids",
          [](const Pipeline& p, const py::array_t<Index, py::array::forcecast>& stage,
             const py::array_t<Index, py::array::forcecast>& microbatch,
             const py::array_t<Index, py::array::forcecast>& instruction) {
            if (stage.ndim() != 1 || stage.size() != microbatch.size() ||
                stage.size() != instruction.size())
              throw std::invalid_argument(
                  "stage, microbatch and instruction must be 1-D and of one length");
            std::vector<Index> out(static_cast<std::size_t>(stage.size()));
            for (py::ssize_t k = 0; k < stage.size(); ++k) {
              const Index s = stage.at(k), mb = microbatch.at(k), ins = instruction.at(k);
              if (s < 0 || s >= p.num_stages() || mb < 0 || mb >= p.num_microbatches() || ins < 0 ||
                  ins > 1)
                throw py::index_error("no computation (stage " + std::to_string(s) + ", microbatch " +
                                      std::to_string(mb) + ", instruction " + std::to_string(ins) +
                                      ")");
              out[static_cast<std::size_t>(k)] = p.id_of(s, mb, static_cast<Instruction>(ins));
            }
            return to_numpy(std::move(out));
          },
          "stage"_a, "microbatch"_a, "instruction"_a,
          "Computation ids of (stage, microbatch, instruction 0 forward | 1 backward), vectorised.")
      .def(
          "order",
          [](const Pipeline& p, Index gpu) {
            if (gpu < 0 || gpu >= p.num_gpus()) throw py::index_error("no GPU " + std::to_string(gpu));
            return to_numpy(std::vector<Index>(p.order_begin(gpu), p.order_end(gpu)));
          },
          "gpu"_a, "Computation ids of one GPU, in execution order.")
      .def(
          "id_of",
          [](const Pipeline& p, Index stage, Index microbatch, int instruction) {
            if (stage < 0 || stage >= p.num_stages() || microbatch < 0 ||
                microbatch >= p.num_microbatches() || instruction < 0 || instruction > 1)
              throw py::index_error("no such computation");
            return p.id_of(stage, microbatch, static_cast<Instruction>(instruction));
          },
          "stage"_a, "microbatch"_a, "instruction"_a);
}
