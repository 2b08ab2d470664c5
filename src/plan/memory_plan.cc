#include "plan/memory_plan.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <unordered_map>

namespace kiln::plan {
namespace {

std::uint64_t AlignUp(std::uint64_t v) { return (v + kAlignment - 1) / kAlignment * kAlignment; }

bool IsViewOp(const ir::Node& n) {
  static const std::set<std::string> kViews = {"Reshape", "Flatten", "Squeeze", "Unsqueeze",
                                               "Identity"};
  return n.domain().empty() && kViews.count(n.op_type()) != 0;
}

struct Group {
  int first = 0, last = 0;  // node indices: defined at `first`, last read at `last`
  std::uint64_t size = 0;
  std::vector<std::string> members;
  std::uint64_t offset = 0;
};

}  // namespace

Result<MemoryPlan> PlanMemory(ir::Graph& g) {
  MemoryPlan plan;
  std::unordered_map<const ir::Value*, int> input_index, output_index;
  for (std::size_t i = 0; i < g.inputs().size(); ++i) input_index[g.inputs()[i]] = static_cast<int>(i);
  for (std::size_t i = 0; i < g.outputs().size(); ++i) output_index.emplace(g.outputs()[i], static_cast<int>(i));
  const int num_inputs = static_cast<int>(g.inputs().size());

  auto value_bytes = [](const ir::Value* v) -> Result<std::uint64_t> {
    std::int64_t n = NumElements(v->shape());
    if (n < 0) {
      return Error(StatusCode::kInvalidArgument, "value '", v->name(), "' has unresolved shape ",
                   ShapeToString(v->shape()), "; fix it with --input-shape");
    }
    return static_cast<std::uint64_t>(n) * DTypeSize(v->dtype());
  };

  // Constants: laid out in order of first appearance.
  for (auto& v : g.values()) {
    if (!v->is_constant()) continue;
    std::uint64_t size = v->constant()->nbytes();
    plan.placements[v->name()] = {kRegionConst, plan.const_size, size};
    plan.const_size = AlignUp(plan.const_size + size);
  }
  for (auto& [v, i] : input_index) {
    KILN_ASSIGN_OR_RETURN(std::uint64_t size, value_bytes(v));
    plan.placements[v->name()] = {kRegionIoBase + i, 0, size};
  }
  for (auto& [v, j] : output_index) {
    if (input_index.count(v) || v->is_constant()) {
      return Error(StatusCode::kInternal, "output '", v->name(),
                   "' is an input or constant; an Identity should have been inserted");
    }
    KILN_ASSIGN_OR_RETURN(std::uint64_t size, value_bytes(v));
    plan.placements[v->name()] = {kRegionIoBase + num_inputs + j, 0, size};
  }

  // Intermediates: lifetimes over the node order, alias groups for views.
  std::unordered_map<const ir::Value*, int> group_of;
  std::vector<Group> groups;
  const auto& nodes = g.nodes();
  // FileConstant outputs are external weights, resolved at load: no placement.
  auto external = [](const ir::Value* v) {
    return v->producer() && v->producer()->op_type() == "FileConstant" && v->producer()->domain() == "kiln";
  };
  auto in_arena = [&](const ir::Value* v) {
    return v && !v->is_constant() && !external(v) && !input_index.count(v) && !output_index.count(v);
  };
  for (int idx = 0; idx < static_cast<int>(nodes.size()); ++idx) {
    ir::Node& n = *nodes[idx];
    n.attrs().erase(kAliasAttr);
    if (n.op_type() == "FileConstant" && n.domain() == "kiln") continue;
    for (ir::Value* o : n.outputs()) {
      if (!in_arena(o)) continue;
      KILN_ASSIGN_OR_RETURN(std::uint64_t size, value_bytes(o));
      ir::Value* src = n.input(0);
      if (IsViewOp(n) && in_arena(src) && group_of.count(src) && o == n.output(0)) {
        int gi = group_of[src];
        group_of[o] = gi;
        groups[gi].members.push_back(o->name());
        n.SetAttr(kAliasAttr, ir::Attribute::Int(1));
        continue;
      }
      group_of[o] = static_cast<int>(groups.size());
      Group grp;
      grp.first = grp.last = idx;
      grp.size = AlignUp(size);
      grp.members.push_back(o->name());
      groups.push_back(grp);
    }
    auto touch = [&](const ir::Value* in) {
      auto it = group_of.find(in);
      if (it != group_of.end()) groups[it->second].last = std::max(groups[it->second].last, idx);
    };
    for (ir::Value* in : n.inputs()) touch(in);
    // Values captured by subgraphs are read when this node runs.
    for (auto& [k, a] : n.attrs()) {
      std::vector<std::shared_ptr<ir::Graph>> subs = a.graphs;
      if (a.g) subs.push_back(a.g);
      for (auto& sg : subs) {
        for (auto& sn : sg->nodes()) {
          for (ir::Value* in : sn->inputs()) touch(in);
        }
      }
    }
  }

  // Lower bound and no-reuse total.
  std::vector<std::int64_t> live(nodes.size() + 1, 0);
  for (auto& grp : groups) {
    plan.no_reuse_size += grp.size;
    for (int t = grp.first; t <= grp.last; ++t) live[t] += static_cast<std::int64_t>(grp.size);
  }
  plan.lower_bound = live.empty() ? 0 : static_cast<std::uint64_t>(*std::max_element(live.begin(), live.end()));

  // Greedy: largest first, lowest offset that fits among overlapping placed groups.
  std::vector<int> order(groups.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (groups[a].size != groups[b].size) return groups[a].size > groups[b].size;
    return groups[a].first < groups[b].first;
  });
  std::vector<int> placed;
  for (int gi : order) {
    Group& grp = groups[gi];
    std::vector<std::pair<std::uint64_t, std::uint64_t>> busy;  // [offset, end)
    for (int pi : placed) {
      const Group& p = groups[pi];
      if (p.first <= grp.last && grp.first <= p.last) busy.emplace_back(p.offset, p.offset + p.size);
    }
    std::sort(busy.begin(), busy.end());
    std::uint64_t best = UINT64_MAX, best_gap = UINT64_MAX, cursor = 0;
    for (auto& [s, e] : busy) {
      if (s > cursor && s - cursor >= grp.size && s - cursor < best_gap) {
        best = cursor;
        best_gap = s - cursor;
      }
      cursor = std::max(cursor, e);
    }
    grp.offset = best != UINT64_MAX ? best : cursor;
    plan.arena_size = std::max(plan.arena_size, grp.offset + grp.size);
    placed.push_back(gi);
  }
  for (auto& [v, gi] : group_of) {
    KILN_ASSIGN_OR_RETURN(std::uint64_t size, value_bytes(v));
    plan.placements[v->name()] = {kRegionArena, groups[gi].offset, size};
  }
  return plan;
}

}  // namespace kiln::plan
