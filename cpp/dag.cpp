#include "dag.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace perseus {

Dag::Dag(const Pipeline& p) : num_nodes_(p.size()) {
  std::vector<std::pair<Index, Index>> edges;
  edges.reserve(ix(num_nodes_) * 2);
  const Index last = p.num_stages() - 1;
  for (Index stage = 0; stage <= last; ++stage) {
    for (Index mb = 0; mb < p.num_microbatches(); ++mb) {
      if (stage < last) {
        edges.emplace_back(p.id_of(stage, mb, Instruction::Forward),
                           p.id_of(stage + 1, mb, Instruction::Forward));
        edges.emplace_back(p.id_of(stage + 1, mb, Instruction::Backward),
                           p.id_of(stage, mb, Instruction::Backward));
      } else {
        edges.emplace_back(p.id_of(stage, mb, Instruction::Forward),
                           p.id_of(stage, mb, Instruction::Backward));
      }
    }
  }
  for (Index gpu = 0; gpu < p.num_gpus(); ++gpu)
    for (const Index* it = p.order_begin(gpu); it + 1 < p.order_end(gpu); ++it)
      edges.emplace_back(it[0], it[1]);
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());

  const auto n = ix(num_nodes_);
  succ_offset_.assign(n + 1, 0);
  pred_offset_.assign(n + 1, 0);
  for (const auto& [u, v] : edges) {
    ++succ_offset_[ix(u) + 1];
    ++pred_offset_[ix(v) + 1];
  }
  for (std::size_t i = 0; i < n; ++i) {
    succ_offset_[i + 1] += succ_offset_[i];
    pred_offset_[i + 1] += pred_offset_[i];
  }
  succ_.resize(edges.size());
  pred_.resize(edges.size());
  std::vector<Index> fill_s(succ_offset_.begin(), succ_offset_.end() - 1);
  std::vector<Index> fill_p(pred_offset_.begin(), pred_offset_.end() - 1);
  for (const auto& [u, v] : edges) {
    succ_[ix(fill_s[ix(u)]++)] = ComputationId(v);
    pred_[ix(fill_p[ix(v)]++)] = ComputationId(u);
  }

  // Kahn's algorithm.
  std::vector<Index> indegree(n);
  for (std::size_t v = 0; v < n; ++v) indegree[v] = pred_offset_[v + 1] - pred_offset_[v];
  topo_.reserve(n);
  for (ComputationId v(0); v.value() < num_nodes_; ++v)
    if (indegree[v.index()] == 0) topo_.push_back(v);
  for (std::size_t head = 0; head < topo_.size(); ++head) {
    const ComputationId u = topo_[head];
    for (const ComputationId* w = successors_begin(u); w != successors_end(u); ++w)
      if (--indegree[w->index()] == 0) topo_.push_back(*w);
  }
  if (topo_.size() != n)
    throw std::invalid_argument(
        std::string("the ") + schedule_name(p.kind()) + " schedule with " +
        std::to_string(p.num_gpus()) + " GPUs, " + std::to_string(p.virtual_stages()) +
        " virtual stages and " + std::to_string(p.num_microbatches()) +
        " microbatches deadlocks (its execution order contradicts the data dependencies)");
}

void check_deadlock_free(const Pipeline& pipeline) { const Dag check(pipeline); }

}  // namespace perseus
