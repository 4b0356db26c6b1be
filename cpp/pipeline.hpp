// Pipeline schedules: which computations each GPU runs, and in which order.
//
// A pipeline of `num_gpus` GPUs trains on `num_microbatches` microbatches per
// iteration. The model is cut into `num_gpus * virtual_stages` chunks ("stages"
// in a profile); chunk k runs on GPU k % num_gpus, as virtual chunk
// k / num_gpus of that GPU. Every chunk runs a forward and a backward
// computation per microbatch.
//
// The orders reproduce Megatron-LM's schedules:
//   gpipe             all forwards, then all backwards, in microbatch order;
//   1f1b              min(G-g-1, M) warm-up forwards, steady one-forward-
//                     one-backward, then the remaining backwards;
//   interleaved-1f1b  Megatron's virtual-pipeline schedule: microbatches run
//                     in groups of G per chunk (the "schedule table"),
//                     (G-g-1)*2 + (V-1)*G warm-up forwards, then steady 1F1B,
//                     with backwards visiting chunks in reverse.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "index.hpp"

namespace perseus {

enum class Instruction : std::uint8_t { Forward = 0, Backward = 1 };

enum class ScheduleKind : std::uint8_t { GPipe, OneFOneB, Interleaved1F1B };

// Every schedule, in the order their names are listed to users (the Python
// API's SCHEDULES and the CLI's choices come from here).
inline constexpr std::array<ScheduleKind, 3> kScheduleKinds{ScheduleKind::OneFOneB, ScheduleKind::GPipe,
                                                            ScheduleKind::Interleaved1F1B};

// Parses "gpipe", "1f1b" or "interleaved-1f1b"; throws std::invalid_argument.
ScheduleKind parse_schedule(const std::string& name);
const char* schedule_name(ScheduleKind kind);

// The schedule rules, the one place they are written: every count >= 1;
// interleaved-1f1b needs virtual_stages >= 2 and microbatches >= num_gpus,
// the others exactly one chunk per GPU; at most 2^30 computations. Throws
// std::invalid_argument naming the argument (virtual_stages, microbatches)
// as the Python API spells it. The Pipeline constructor calls it; Python
// calls it through the bindings.
void check_schedule(ScheduleKind kind, Index num_gpus, Index virtual_stages, Index num_microbatches);

struct Computation {
  Index stage;       // model chunk (profile stage), 0 .. num_stages-1
  Index gpu;         // stage % num_gpus
  Index chunk;       // virtual chunk on that GPU, stage / num_gpus
  Index microbatch;  // 0 .. num_microbatches-1
  Instruction instruction;
};

// The computations of one iteration and each GPU's execution order.
// Computation ids are dense, 0 .. size()-1.
class Pipeline {
 public:
  // Throws std::invalid_argument for sizes the schedule cannot run (check_schedule).
  Pipeline(ScheduleKind kind, Index num_gpus, Index virtual_stages, Index num_microbatches);

  ScheduleKind kind() const { return kind_; }
  Index num_gpus() const { return num_gpus_; }
  Index virtual_stages() const { return virtual_stages_; }
  Index num_stages() const { return num_gpus_ * virtual_stages_; }
  Index num_microbatches() const { return num_microbatches_; }
  Index size() const { return static_cast<Index>(computations_.size()); }

  const Computation& computation(Index id) const { return computations_[id]; }
  const std::vector<Computation>& computations() const { return computations_; }

  // Id of the computation (stage, microbatch, instruction).
  Index id_of(Index stage, Index microbatch, Instruction instruction) const {
    return ((stage * num_microbatches_) + microbatch) * 2 + static_cast<Index>(instruction);
  }

  // Execution order of one GPU: ids in order_[order_offset_[g] .. order_offset_[g+1]).
  const Index* order_begin(Index gpu) const { return order_.data() + order_offset_[gpu]; }
  const Index* order_end(Index gpu) const { return order_.data() + order_offset_[gpu + 1]; }

 private:
  void append(Index gpu, Index chunk, Index microbatch, Instruction instruction);
  void build_gpipe(Index gpu);
  void build_1f1b(Index gpu);
  void build_interleaved(Index gpu);

  ScheduleKind kind_;
  Index num_gpus_;
  Index virtual_stages_;
  Index num_microbatches_;
  std::vector<Computation> computations_;  // indexed by id_of()
  std::vector<Index> order_;
  std::vector<Index> order_offset_;
};

}  // namespace perseus
