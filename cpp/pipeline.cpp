#include "pipeline.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace perseus {

ScheduleKind parse_schedule(const std::string& name) {
  std::string known;
  for (const ScheduleKind kind : kScheduleKinds) {
    if (name == schedule_name(kind)) return kind;
    known += (known.empty() ? "" : ", ") + std::string(schedule_name(kind));
  }
  throw std::invalid_argument("schedule '" + name + "' is not known; choose one of: " + known);
}

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::OneFOneB: return "1f1b";
    case ScheduleKind::GPipe: return "gpipe";
    case ScheduleKind::Interleaved1F1B: return "interleaved-1f1b";
  }
  return "?";
}

void check_schedule(ScheduleKind kind, Index num_gpus, Index virtual_stages, Index num_microbatches) {
  const auto count = [](const char* name, Index value) {
    if (value < 1)
      throw std::invalid_argument(std::string(name) + " must be an integer >= 1, got " +
                                  std::to_string(value));
  };
  count("microbatches", num_microbatches);
  count("virtual_stages", virtual_stages);
  count("the number of pipeline GPUs", num_gpus);
  const std::string name = schedule_name(kind);
  if (kind == ScheduleKind::Interleaved1F1B) {
    if (virtual_stages < 2)
      throw std::invalid_argument("the interleaved-1f1b schedule needs virtual_stages >= 2 (got " +
                                  std::to_string(virtual_stages) +
                                  "); use '1f1b' for one chunk per GPU");
    if (num_microbatches < num_gpus)
      throw std::invalid_argument("the interleaved-1f1b schedule cannot run " +
                                  std::to_string(num_microbatches) + " microbatches on " +
                                  std::to_string(num_gpus) +
                                  " GPUs: it needs at least as many microbatches as GPUs");
  } else if (virtual_stages != 1) {
    throw std::invalid_argument("the " + name + " schedule has one chunk per GPU; virtual_stages=" +
                                std::to_string(virtual_stages) + " needs schedule='interleaved-1f1b'");
  }
  // In doubles: the product of three int32 counts overflows int64 (each factor is >= 1 here).
  const double total = 2.0 * num_gpus * virtual_stages * num_microbatches;
  if (total > 0x3fffffff)
    throw std::invalid_argument("pipeline too large: " + std::to_string(num_gpus) + " GPUs x " +
                                std::to_string(virtual_stages) + " chunks x " +
                                std::to_string(num_microbatches) +
                                " microbatches is more than 2^30 computations");
}

Pipeline::Pipeline(ScheduleKind kind, Index num_gpus, Index virtual_stages, Index num_microbatches)
    : kind_(kind),
      num_gpus_(num_gpus),
      virtual_stages_(virtual_stages),
      num_microbatches_(num_microbatches) {
  check_schedule(kind, num_gpus, virtual_stages, num_microbatches);
  const double total = 2.0 * num_gpus * virtual_stages * num_microbatches;
  computations_.resize(static_cast<std::size_t>(total));
  for (Index stage = 0; stage < num_stages(); ++stage)
    for (Index mb = 0; mb < num_microbatches; ++mb)
      for (Instruction ins : {Instruction::Forward, Instruction::Backward})
        computations_[static_cast<std::size_t>(id_of(stage, mb, ins))] =
            Computation{stage, stage % num_gpus, stage / num_gpus, mb, ins};

  order_.reserve(computations_.size());
  order_offset_.reserve(static_cast<std::size_t>(num_gpus) + 1);
  for (Index gpu = 0; gpu < num_gpus; ++gpu) {
    order_offset_.push_back(static_cast<Index>(order_.size()));
    switch (kind) {
      case ScheduleKind::GPipe: build_gpipe(gpu); break;
      case ScheduleKind::OneFOneB: build_1f1b(gpu); break;
      case ScheduleKind::Interleaved1F1B: build_interleaved(gpu); break;
    }
  }
  order_offset_.push_back(static_cast<Index>(order_.size()));
}

void Pipeline::append(Index gpu, Index chunk, Index microbatch, Instruction instruction) {
  order_.push_back(id_of(chunk * num_gpus_ + gpu, microbatch, instruction));
}

void Pipeline::build_gpipe(Index gpu) {
  for (Index mb = 0; mb < num_microbatches_; ++mb) append(gpu, 0, mb, Instruction::Forward);
  for (Index mb = 0; mb < num_microbatches_; ++mb) append(gpu, 0, mb, Instruction::Backward);
}

void Pipeline::build_1f1b(Index gpu) {
  const Index warmup = std::min(num_gpus_ - gpu - 1, num_microbatches_);
  Index next_forward = 0;
  Index next_backward = 0;
  for (; next_forward < warmup; ++next_forward) append(gpu, 0, next_forward, Instruction::Forward);
  while (next_forward < num_microbatches_) {
    append(gpu, 0, next_forward++, Instruction::Forward);
    append(gpu, 0, next_backward++, Instruction::Backward);
  }
  while (next_backward < num_microbatches_) append(gpu, 0, next_backward++, Instruction::Backward);
}

void Pipeline::build_interleaved(Index gpu) {
  // Megatron's schedule table: microbatches in groups of `group` (its default
  // microbatch_group_size_per_vp_stage is the pipeline size); within a group,
  // every chunk runs the whole group before the next chunk starts. The last
  // group takes all remaining microbatches.
  const Index chunks = virtual_stages_;
  const Index group = num_gpus_;
  std::vector<std::pair<Index, Index>> table;  // (microbatch, chunk), forward order
  table.reserve(static_cast<std::size_t>(num_microbatches_) * chunks);
  for (Index first = 0; first < num_microbatches_; first += group) {
    const Index last = (first + group >= num_microbatches_) ? num_microbatches_ : first + group;
    for (Index chunk = 0; chunk < chunks; ++chunk)
      for (Index mb = first; mb < last; ++mb) table.emplace_back(mb, chunk);
    if (last == num_microbatches_) break;
  }
  const Index total = static_cast<Index>(table.size());
  const Index warmup = std::min(total, (num_gpus_ - gpu - 1) * 2 + (chunks - 1) * group);
  auto forward = [&](Index k) {
    append(gpu, table[static_cast<std::size_t>(k)].second, table[static_cast<std::size_t>(k)].first,
           Instruction::Forward);
  };
  auto backward = [&](Index k) {
    append(gpu, chunks - 1 - table[static_cast<std::size_t>(k)].second,
           table[static_cast<std::size_t>(k)].first, Instruction::Backward);
  };
  for (Index k = 0; k < warmup; ++k) forward(k);
  for (Index k = 0; k < total - warmup; ++k) {
    forward(k + warmup);
    backward(k);
  }
  for (Index k = total - warmup; k < total; ++k) backward(k);
}

}  // namespace perseus
