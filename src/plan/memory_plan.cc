#include "plan/memory_plan.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <unordered_set>
#include <unordered_map>

#include "common/checked.h"
#include "common/utf8.h"

namespace kiln::plan {
namespace {

std::uint64_t AlignUp(std::uint64_t v) { return (v + kAlignment - 1) / kAlignment * kAlignment; }

bool IsViewOp(const ir::Node& n) {
  static const std::set<std::string> kViews = {"Reshape", "Flatten", "Squeeze", "Unsqueeze",
                                               "Identity"};
  return n.domain().empty() && kViews.count(n.op_type()) != 0;
}

// Calls f(value) for each value node `n` reads: its inputs and what its
// subgraphs (If branches, Loop bodies) capture.
template <typename F>
void ForEachRead(const ir::Node& n, F&& f) {
  for (const ir::Value* in : n.inputs()) {
    if (in) f(in);
  }
  for (auto& [k, a] : n.attrs()) {
    std::vector<std::shared_ptr<ir::Graph>> subs = a.graphs;
    if (a.g) subs.push_back(a.g);
    for (auto& sg : subs) {
      if (!sg) continue;
      for (auto& sn : sg->nodes()) {
        for (const ir::Value* in : sn->inputs()) {
          if (in) f(in);
        }
      }
    }
  }
}

struct Group {
  int first = 0, last = 0;  // node indices: defined at `first`, last read at `last`
  bool host = false;        // in the host arena
  std::uint64_t size = 0;
  std::vector<std::string> members;
  std::uint64_t offset = 0;
};

}  // namespace

int InPlaceCandidate(const ir::Node& n) {
  // "kiln.sum": ops::kSumAttr (the plan layer does not use ops).
  if (n.op_type() == "Conv" && n.domain().empty() && n.GetInt("kiln.sum", 0) == 1 && n.num_outputs() == 1 &&
      n.input(3)) {
    return 3;
  }
  return -1;
}

bool LivesOnHost(const ir::Value* v) {
  const ir::Node* p = v ? v->producer() : nullptr;
  return p && (ir::IsHostPlaced(*p) || ir::IsCopyToHost(*p));
}

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
  // Each value's last reader (node index), for in-place outputs.
  std::unordered_map<const ir::Value*, int> last_read;
  for (int idx = 0; idx < static_cast<int>(nodes.size()); ++idx) {
    ForEachRead(*nodes[idx], [&](const ir::Value* in) { last_read[in] = idx; });
  }
  std::vector<int> group_last_read;  // by group: the last node reading any member (-1: none)
  auto last_read_of = [&](const ir::Value* v) {
    auto it = last_read.find(v);
    return it == last_read.end() ? -1 : it->second;
  };
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
    n.attrs().erase(kInPlaceAttr);
    if (n.op_type() == "FileConstant" && n.domain() == "kiln") continue;
    const int inplace = InPlaceCandidate(n);
    for (ir::Value* o : n.outputs()) {
      if (!in_arena(o)) continue;
      KILN_ASSIGN_OR_RETURN(std::uint64_t size, value_bytes(o));
      ir::Value* src = n.input(0);
      // A view shares its input's bytes, which the plan (and the loader's
      // check of it) requires to be as many as its output's: not so where
      // the output's planned shape is a bound of a data-dependent one (a
      // Reshape to a target computed at run time), which then runs as a copy.
      const auto same_bytes = [&]() {
        auto sb = value_bytes(src);
        return sb.ok() && sb.value() == size;
      };
      if (IsViewOp(n) && in_arena(src) && group_of.count(src) && o == n.output(0) &&
          LivesOnHost(src) == LivesOnHost(o) && same_bytes()) {
        int gi = group_of[src];
        group_of[o] = gi;
        groups[gi].members.push_back(o->name());
        group_last_read[gi] = std::max(group_last_read[gi], last_read_of(o));
        n.SetAttr(kAliasAttr, ir::Attribute::Int(1));
        continue;
      }
      // Output 0 over the candidate input's bytes, when this node reads
      // them last (and no view of them is read later).
      if (inplace >= 0 && o == n.output(0)) {
        ir::Value* r = n.input(inplace);
        auto it = group_of.find(r);
        if (in_arena(r) && it != group_of.end() && LivesOnHost(r) == LivesOnHost(o) &&
            groups[it->second].size == AlignUp(size) && r->dtype() == o->dtype() && r->shape() == o->shape() &&
            group_last_read[it->second] <= idx &&
            // Not while this node reads those bytes through another input
            // (Conv(a) + a): it would overwrite what it still reads.
            [&] {
              for (int i = 0; i < n.num_inputs(); ++i) {
                auto gi = group_of.find(n.input(i));
                if (i != inplace && gi != group_of.end() && gi->second == it->second) return false;
              }
              return true;
            }()) {
          const int gi = it->second;
          group_of[o] = gi;
          groups[gi].members.push_back(o->name());
          group_last_read[gi] = std::max(group_last_read[gi], last_read_of(o));
          n.SetAttr(kInPlaceAttr, ir::Attribute::Int(inplace));
          continue;
        }
      }
      group_of[o] = static_cast<int>(groups.size());
      group_last_read.push_back(last_read_of(o));
      Group grp;
      grp.first = grp.last = idx;
      grp.host = LivesOnHost(o);
      grp.size = AlignUp(size);
      grp.members.push_back(o->name());
      groups.push_back(grp);
    }
    // Values captured by subgraphs are read when this node runs.
    ForEachRead(n, [&](const ir::Value* in) {
      auto it = group_of.find(in);
      if (it != group_of.end()) groups[it->second].last = std::max(groups[it->second].last, idx);
    });
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
      if (p.host == grp.host && p.first <= grp.last && grp.first <= p.last) busy.emplace_back(p.offset, p.offset + p.size);
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
    std::uint64_t& size = grp.host ? plan.host_arena_size : plan.arena_size;
    size = std::max(size, grp.offset + grp.size);
    placed.push_back(gi);
  }
  const int host_region = HostArenaRegion(g.inputs().size(), g.outputs().size());
  for (auto& [v, gi] : group_of) {
    KILN_ASSIGN_OR_RETURN(std::uint64_t size, value_bytes(v));
    plan.placements[v->name()] = {groups[gi].host ? host_region : kRegionArena, groups[gi].offset, size};
  }
  return plan;
}

// ---- verification of untrusted plans ---------------------------------------

namespace {

template <typename... Args>
Status Corrupt(const Args&... args) {
  return Error(StatusCode::kCorrupt, args...);
}

bool IsExternal(const ir::Value* v) {
  return v->producer() && v->producer()->op_type() == "FileConstant" && v->producer()->domain() == "kiln";
}

std::string RegionName(const ir::Graph& g, int region) {
  const int n_in = static_cast<int>(g.inputs().size());
  const int n_out = static_cast<int>(g.outputs().size());
  if (region == kRegionConst) return "region 0 (constants)";
  if (region == kRegionArena) return "region 1 (arena)";
  if (region >= kRegionIoBase && region < kRegionIoBase + n_in) {
    return StrCat("region ", region, " (input ", region - kRegionIoBase, " '",
                  g.inputs()[region - kRegionIoBase]->name(), "')");
  }
  if (region >= kRegionIoBase + n_in && region < kRegionIoBase + n_in + n_out) {
    const int j = region - kRegionIoBase - n_in;
    return StrCat("region ", region, " (output ", j, " '", g.outputs()[j]->name(), "')");
  }
  if (region == HostArenaRegion(n_in, n_out)) return StrCat("region ", region, " (host arena)");
  return StrCat("region ", region);
}

std::string RangeString(const ir::SymbolRange& r) {
  return r.max < 0 ? StrCat("[", r.min, ", unbounded]") : StrCat("[", r.min, ", ", r.max, "]");
}

// A symbol name (of the symbol table or a value's "sym"): 1 to
// kMaxSymbolNameBytes of valid UTF-8. `what` says where it is.
Status CheckSymbolName(const std::string& name, const std::string& what) {
  if (name.empty() || name.size() > ir::kMaxSymbolNameBytes) {
    return Corrupt(what, ": symbol name '", EscapeBytes(name.substr(0, 64)), name.size() > 64 ? "..." : "", "' has ",
                   name.size(), " bytes, expected 1 to ", ir::kMaxSymbolNameBytes);
  }
  const std::size_t bad = FindInvalidUtf8(name);
  if (bad != std::string::npos) {
    return Corrupt(what, ": symbol name '", EscapeBytes(name), "' is not valid UTF-8 (byte ", bad, ")");
  }
  return Status::Ok();
}

// The symbol table (top-level graph): names, and ranges with
// 0 <= min <= max <= kMaxTensorBytes, or max = -1 (unbounded).
Status VerifySymbols(const ir::Graph& g) {
  for (auto& [name, r] : g.symbols()) {
    KILN_RETURN_IF_ERROR(CheckSymbolName(name, "graph symbols"));
    const bool ok = r.min >= 0 && r.min <= kMaxTensorBytes && (r.max == -1 || (r.max >= r.min && r.max <= kMaxTensorBytes));
    if (!ok) {
      return Corrupt("symbol '", name, "' has range [", r.min, ", ", r.max, "], expected 0 <= min <= max <= ",
                     kMaxTensorBytes, " or max = -1 (unbounded)");
    }
  }
  return Status::Ok();
}

// A value's per-dim symbols: one name per dim ("" = none), each a symbol of
// the top-level graph `root`, whose range holds the dim's extent (unless the
// dim is data-dependent: then the extent is only its bound).
Status VerifyValueSymbols(const ir::Value& v, const ir::Graph& root, const std::string& where) {
  const auto& sym = v.dim_params();
  if (sym.empty()) return Status::Ok();
  const Shape& shape = v.shape();
  if (sym.size() != shape.size()) {
    return Corrupt("value '", v.name(), "'", where, ": sym has ", sym.size(), " names, expected ", shape.size(),
                   " (one per dim of ", DTypeName(v.dtype()), ShapeToString(shape), ")");
  }
  for (std::size_t d = 0; d < sym.size(); ++d) {
    if (sym[d].empty()) continue;
    const std::string what = StrCat("value '", v.name(), "'", where, " dim ", d);
    KILN_RETURN_IF_ERROR(CheckSymbolName(sym[d], what));
    auto it = root.symbols().find(sym[d]);
    if (it == root.symbols().end()) {
      return Corrupt(what, ": symbol '", sym[d], "' is not in the graph's symbols");
    }
    if (d < 64 && (v.dynamic_mask() >> d & 1)) continue;
    const ir::SymbolRange& r = it->second;
    if (shape[d] < r.min || (r.max >= 0 && shape[d] > r.max)) {
      return Corrupt(what, " has extent ", shape[d], ", outside the range ", RangeString(r), " of its symbol '",
                     sym[d], "'");
    }
  }
  return Status::Ok();
}

// Gears (top-level graph): 1 to kMaxGears signatures, each one shape per
// graph input with the input's rank, its static dims, its symbolic dims
// within their symbols' ranges, and one extent per symbol across the inputs.
Status VerifyGears(const ir::Graph& g) {
  if (g.gears().empty()) {
    if (g.gears_only()) return Corrupt("gears_only is set but the graph has no gears");
    return Status::Ok();
  }
  if (g.gears().size() > ir::kMaxGears) {
    return Corrupt("the graph has ", g.gears().size(), " gears, at most ", ir::kMaxGears);
  }
  for (std::size_t k = 0; k < g.gears().size(); ++k) {
    const auto& sig = g.gears()[k];
    if (sig.size() != g.inputs().size()) {
      return Corrupt("gear ", k, " has ", sig.size(), " shapes, expected one per graph input (", g.inputs().size(), ")");
    }
    std::map<std::string, std::pair<std::int64_t, std::string>> seen;
    for (std::size_t i = 0; i < sig.size(); ++i) {
      const ir::Value& v = *g.inputs()[i];
      const Shape& s = sig[i];
      const std::string who = StrCat("gear ", k, " input ", i, " '", v.name(), "'");
      if (s.size() != v.shape().size()) {
        return Corrupt(who, " has rank ", s.size(), ", the input has rank ", v.shape().size());
      }
      auto bytes = CheckedTensorBytes(v.dtype(), s, who);
      if (!bytes.ok()) return Corrupt(bytes.status().message());
      for (std::size_t d = 0; d < s.size(); ++d) {
        const bool symbolic = d < 64 && (v.symbolic_mask() >> d & 1);
        if (!symbolic) {
          if (s[d] != v.shape()[d]) {
            return Corrupt(who, " dim ", d, " is ", s[d], ", but the input's dim is fixed to ", v.shape()[d]);
          }
          continue;
        }
        const std::string sym = d < v.dim_params().size() ? v.dim_params()[d] : std::string();
        auto it = g.symbols().find(sym);
        if (sym.empty() || it == g.symbols().end()) {
          return Corrupt(who, " dim ", d, ": the input's symbolic dim names no symbol of the graph");
        }
        const ir::SymbolRange& r = it->second;
        if (s[d] < r.min || (r.max >= 0 && s[d] > r.max)) {
          return Corrupt(who, " dim ", d, " is ", s[d], ", outside the range ", RangeString(r), " of symbol '", sym,
                         "'");
        }
        auto [a, added] = seen.emplace(sym, std::make_pair(s[d], StrCat("input ", i, " dim ", d)));
        if (!added && a->second.first != s[d]) {
          return Corrupt(who, " dim ", d, " gives symbol '", sym, "' ", s[d], ", but ", a->second.second, " gives ",
                         a->second.first);
        }
      }
    }
  }
  return Status::Ok();
}

Status VerifyGraphAt(const ir::Graph& g, const ir::Graph& root, int depth) {
  const bool top = depth == 0;
  const std::string where = top ? std::string() : StrCat(" in subgraph '", g.name(), "'");
  if (top) {
    KILN_RETURN_IF_ERROR(VerifySymbols(g));
  } else if (!g.symbols().empty()) {
    return Corrupt("subgraph '", g.name(), "' has symbols; only the top-level graph has a symbol table");
  } else if (!g.gears().empty() || g.gears_only()) {
    return Corrupt("subgraph '", g.name(), "' has gears; only the top-level graph has them");
  }
  for (auto& v : g.values()) {
    if (!DTypeSupported(v->dtype())) {
      return Corrupt("value '", v->name(), "'", where, " has unsupported dtype ", static_cast<int>(v->dtype()));
    }
    if (!CheckedTensorBytes(v->dtype(), v->shape(), v->name()).ok()) {  // again for the message
      return Corrupt(CheckedTensorBytes(v->dtype(), v->shape(), StrCat("value '", v->name(), "'", where)).status().message());
    }
    const std::size_t rank = v->shape().size();
    if (rank < 64 && (v->dynamic_mask() >> rank) != 0) {
      return Corrupt("value '", v->name(), "'", where, ": data-dependent dims mask ", v->dynamic_mask(),
                     " names dims beyond its rank ", rank);
    }
    KILN_RETURN_IF_ERROR(VerifyValueSymbols(*v, root, where));
    if (v->shape_input()) {  // format version 8 (ops::InferNode, "Shape inputs")
      const std::int64_t n = NumElements(v->shape());
      const bool integer = v->dtype() == DType::kInt64 || v->dtype() == DType::kInt32;
      const bool floating = v->dtype() == DType::kFloat32 || v->dtype() == DType::kFloat64;
      if (!top || !g.IsGraphInput(v.get())) {
        return Corrupt("value '", v->name(), "'", where, " is marked a shape input but is not an input of the "
                       "top-level graph");
      }
      if (n < 0 || v->dynamic_mask() || !(integer || floating) ||
          (integer && static_cast<std::uint64_t>(n) * DTypeSize(v->dtype()) > ir::kShapeInputLimitBytes) ||
          (floating && n > ir::kShapeInputFloatElements)) {
        return Corrupt("input '", v->name(), "' is marked a shape input but is ", DTypeName(v->dtype()),
                       ShapeToString(v->shape()), "; shape inputs are int32/int64 tensors of at most ",
                       ir::kShapeInputLimitBytes, " bytes or float32/float64 tensors of at most ",
                       ir::kShapeInputFloatElements, " elements");
      }
    }
    if (v->is_constant() && (v->constant()->dtype() != v->dtype() || v->constant()->shape() != v->shape())) {
      return Corrupt("constant '", v->name(), "'", where, " is declared ", DTypeName(v->dtype()),
                     ShapeToString(v->shape()), " but holds ", DTypeName(v->constant()->dtype()),
                     ShapeToString(v->constant()->shape()));
    }
  }
  std::unordered_map<const ir::Value*, std::size_t> in_index, out_index;
  for (std::size_t i = 0; i < g.inputs().size(); ++i) {
    const ir::Value* v = g.inputs()[i];
    if (v->is_constant()) return Corrupt("constant '", v->name(), "' is listed as graph input ", i, where);
    auto [it, added] = in_index.emplace(v, i);
    if (!added) return Corrupt("input '", v->name(), "' is listed twice (graph inputs ", it->second, " and ", i, ")", where);
    if (v->producer()) {
      return Corrupt("graph input ", i, " '", v->name(), "'", where, " is written by ", v->producer()->Describe());
    }
    if (top && v->is_dynamic()) {
      return Corrupt("input '", v->name(), "' is marked data-dependent; model inputs have static shapes");
    }
  }
  for (std::size_t j = 0; j < g.outputs().size(); ++j) {
    const ir::Value* v = g.outputs()[j];
    auto [it, added] = out_index.emplace(v, j);
    if (!added) return Corrupt("output '", v->name(), "' is listed twice (graph outputs ", it->second, " and ", j, ")", where);
    if (v->is_constant()) return Corrupt("graph output ", j, " '", v->name(), "'", where, " is a constant; outputs are written by a node");
    auto in = in_index.find(v);
    if (in != in_index.end()) {
      return Corrupt("graph output ", j, " '", v->name(), "'", where, " is also graph input ", in->second);
    }
    if (!v->producer()) return Corrupt("graph output ", j, " '", v->name(), "'", where, " is written by no node");
    if (IsExternal(v)) {
      return Corrupt("graph output ", j, " '", v->name(), "'", where, " is an external weight; outputs are written by a node");
    }
  }
  // Placement: each value's memory follows from its producer (LivesOnHost);
  // no node may read memory of the other kind.
  for (auto& n : g.nodes()) {
    const ir::Attribute* pa = n->FindAttr(ir::kPlaceAttr);
    if (pa) {
      if (pa->kind != ir::Attribute::Kind::kString || pa->s != ir::kPlaceHost) {
        return Corrupt(n->Describe(), where, ": attribute '", ir::kPlaceAttr, "' must be the string \"", ir::kPlaceHost, "\"");
      }
      if (n->domain() == "kiln" || (n->op_type() == "If" && n->domain().empty())) {
        return Corrupt(n->Describe(), where, " cannot be placed on the CPU (attribute '", ir::kPlaceAttr, "')");
      }
    }
    if (const ir::Attribute* ra = n->FindAttr(ir::kRoundAttr)) {  // format version 9
      if (ra->kind != ir::Attribute::Kind::kString || ra->s != ir::kRoundNearestEven) {
        return Corrupt(n->Describe(), where, ": attribute '", ir::kRoundAttr, "' must be the string \"",
                       ir::kRoundNearestEven, "\"");
      }
      const ir::Attribute* to = n->FindAttr("to");
      if (n->op_type() != "Cast" || !n->domain().empty() || !to || to->kind != ir::Attribute::Kind::kInt ||
          to->i != static_cast<std::int64_t>(DType::kBFloat16) || !n->input(0) ||
          n->input(0)->dtype() != DType::kFloat32) {
        return Corrupt(n->Describe(), where, ": attribute '", ir::kRoundAttr,
                       "' belongs only on a Cast from float32 to bfloat16");
      }
    }
    const bool host = pa != nullptr;
    for (const ir::Value* v : n->inputs()) {
      if (!v || v->is_constant() || IsExternal(v)) continue;
      const bool want_host = host || ir::IsCopyFromHost(*n);
      if (LivesOnHost(v) != want_host) {
        return Corrupt(n->Describe(), where, host ? " runs on the CPU" : " runs on the target device", " but reads '",
                       v->name(), "', which lives in ", LivesOnHost(v) ? "host" : "device",
                       " memory (placement copies are missing)");
      }
    }
  }
  for (const ir::Value* v : g.outputs()) {
    if (LivesOnHost(v)) {
      return Corrupt("graph output '", v->name(), "'", where, " is written into host memory by ",
                     v->producer()->Describe(), "; outputs live in the device's memory");
    }
  }
  for (auto& n : g.nodes()) {
    if (const ir::Attribute* a = n->FindAttr(kAliasAttr)) {
      if (a->kind != ir::Attribute::Kind::kInt || a->i != 1) {
        return Corrupt(n->Describe(), where, ": attribute '", kAliasAttr, "' must be the integer 1");
      }
    }
    for (auto& [name, a] : n->attrs()) {
      std::vector<const ir::Graph*> subs;
      if (a.g) subs.push_back(a.g.get());
      for (auto& sg : a.graphs) {
        if (sg) subs.push_back(sg.get());
      }
      for (const ir::Graph* sg : subs) {
        for (auto& sn : sg->nodes()) {
          for (const ir::Value* in : sn->inputs()) {
            if (in && in->owner() != sg) {
              return Corrupt(n->Describe(), where, " attribute '", name, "': ", sn->Describe(), " reads outer value '",
                             in->name(), "'; subgraphs in a .kiln file are self-contained");
            }
          }
        }
        Status st = VerifyGraphAt(*sg, root, depth + 1);
        if (!st.ok()) return Corrupt(n->Describe(), " attribute '", name, "': ", st.message());
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status VerifyGraph(const ir::Graph& g) {
  KILN_RETURN_IF_ERROR(VerifyGraphAt(g, g, 0));
  return VerifyGears(g);
}

Status VerifyPlan(const ir::Graph& g, const MemoryPlan& plan, const void* const_base, std::uint64_t const_bytes) {
  KILN_RETURN_IF_ERROR(VerifyGraphAt(g, g, 0));
  KILN_RETURN_IF_ERROR(VerifyGears(g));
  const std::size_t n_in = g.inputs().size();
  const std::size_t n_out = g.outputs().size();
  const int host_region = HostArenaRegion(n_in, n_out);
  const std::int64_t num_regions = host_region + 1;
  if (plan.const_size != const_bytes) {
    return Corrupt("plan const_size ", plan.const_size, " differs from the weights partition's ", const_bytes, " bytes");
  }
  std::unordered_set<const ir::Value*> io;
  for (const ir::Value* v : g.inputs()) io.insert(v);
  for (const ir::Value* v : g.outputs()) io.insert(v);

  std::unordered_map<const ir::Value*, const Placement*> placed;
  std::uint64_t arena_need = 0, host_need = 0;
  const auto* cbase = static_cast<const std::uint8_t*>(const_base);
  for (auto& entry : plan.placements) {
    // Not a structured binding: Clang 14 cannot capture those in lambdas.
    const std::string& name = entry.first;
    const Placement& p = entry.second;
    const ir::Value* v = g.FindValue(name);
    if (!v) return Corrupt("plan places unknown value '", name, "' in region ", p.region, " at offset ", p.offset);
    if (p.region < 0 || p.region >= num_regions) {
      return Corrupt("value '", name, "' is placed in region ", p.region, " at offset ", p.offset,
                     "; the model has regions 0..", num_regions - 1);
    }
    // Built only for an error message (this loop runs for every value).
    auto at = [&]() {
      return StrCat("value '", name, "' placed at offset ", p.offset, " size ", p.size, " in ", RegionName(g, p.region));
    };
    // Checked by VerifyGraphAt: fits int64 and the tensor limit.
    const auto bytes = static_cast<std::uint64_t>(NumElements(v->shape())) * DTypeSize(v->dtype());
    if (p.size != bytes) {
      return Corrupt(at(), ": size differs from the ", bytes, " bytes of ", DTypeName(v->dtype()), ShapeToString(v->shape()));
    }
    std::uint64_t end = 0;
    if (!CheckedAddU(p.offset, p.size, &end)) return Corrupt(at(), ": offset + size overflows");
    if (p.region == kRegionConst) {
      if (!v->is_constant()) return Corrupt(at(), ": only constants live in the constants region");
      const auto data = reinterpret_cast<std::uintptr_t>(v->constant()->data());
      const auto base = reinterpret_cast<std::uintptr_t>(cbase);
      if (end > const_bytes || data < base || data - base != p.offset) {
        return Corrupt(at(), ": the constant's data is not there (weights partition of ", const_bytes, " bytes)");
      }
      if (p.offset % kAlignment != 0) return Corrupt(at(), ": offset is not ", kAlignment, "-byte aligned");
    } else if (p.region == kRegionArena || p.region == host_region) {
      const bool host = p.region == host_region;
      const char* arena_name = host ? "the host arena" : "the arena";
      if (v->is_constant()) return Corrupt(at(), ": a constant cannot live in ", arena_name);
      if (io.count(v)) return Corrupt(at(), ": a graph input or output cannot live in ", arena_name);
      if (!v->producer()) return Corrupt(at(), ": no node writes it");
      if (IsExternal(v)) return Corrupt(at(), ": an external weight has no arena placement");
      if (LivesOnHost(v) != host) {
        return Corrupt(at(), ": ", v->producer()->Describe(), " writes it in ", LivesOnHost(v) ? "host" : "device",
                       " memory");
      }
      if (p.offset % kAlignment != 0) return Corrupt(at(), ": offset is not ", kAlignment, "-byte aligned");
      const std::uint64_t size = host ? plan.host_arena_size : plan.arena_size;
      if (end > size) {
        return Corrupt(at(), ": it ends at ", end, ", past the ", host ? "host arena" : "arena", "'s ", size, " bytes");
      }
      std::uint64_t& need = host ? host_need : arena_need;
      need = std::max(need, end);
    } else {
      const std::size_t k = static_cast<std::size_t>(p.region - kRegionIoBase);
      const ir::Value* owner = k < n_in ? g.inputs()[k] : g.outputs()[k - n_in];
      if (v != owner) {
        return Corrupt(at(), ": that region holds only ", k < n_in ? "input" : "output", " '", owner->name(), "'");
      }
      if (p.offset != 0) return Corrupt(at(), ": an input or output is placed at offset 0 of its region");
    }
    placed[v] = &p;
  }
  // Every value a kernel reads or writes has its bytes somewhere.
  for (auto& v : g.values()) {
    const bool needs = io.count(v.get()) || v->is_constant() || (v->producer() && !IsExternal(v.get()));
    if (!needs) continue;
    auto it = placed.find(v.get());
    if (it == placed.end()) {
      return Corrupt("value '", v->name(), "'",
                     v->producer() ? StrCat(" (written by ", v->producer()->Describe(), ")") : std::string(),
                     " has no placement in the plan");
    }
    if (v->is_constant() && it->second->region != kRegionConst) {
      return Corrupt("constant '", v->name(), "' is placed in ", RegionName(g, it->second->region));
    }
    for (std::size_t i = 0; i < n_in; ++i) {
      if (g.inputs()[i] == v.get() && it->second->region != kRegionIoBase + static_cast<int>(i)) {
        return Corrupt("graph input ", i, " '", v->name(), "' is placed in ", RegionName(g, it->second->region),
                       ", not in its own region ", kRegionIoBase + static_cast<int>(i));
      }
    }
    for (std::size_t j = 0; j < n_out; ++j) {
      const int r = kRegionIoBase + static_cast<int>(n_in + j);
      if (g.outputs()[j] == v.get() && it->second->region != r) {
        return Corrupt("graph output ", j, " '", v->name(), "' is placed in ", RegionName(g, it->second->region),
                       ", not in its own region ", r);
      }
    }
  }

  // Whether `out` has exactly `in`'s bytes in an arena (views, in-place outputs).
  auto same_arena_bytes = [&](const ir::Value* in, const ir::Value* out) {
    auto pi = placed.find(in);
    auto po = placed.find(out);
    return pi != placed.end() && po != placed.end() &&
           (pi->second->region == kRegionArena || pi->second->region == host_region) &&
           po->second->region == pi->second->region && pi->second->offset == po->second->offset &&
           pi->second->size == po->second->size;
  };
  // Views run no kernel: their output must be exactly their input's bytes.
  const auto& nodes = g.nodes();
  for (auto& n : nodes) {
    if (!n->FindAttr(kAliasAttr)) continue;
    if (!IsViewOp(*n) || n->num_outputs() != 1 || n->num_inputs() < 1 || !n->input(0)) {
      return Corrupt(n->Describe(), " is marked as a view (", kAliasAttr, ") but is not a one-output view op");
    }
    if (!same_arena_bytes(n->input(0), n->output(0))) {
      return Corrupt(n->Describe(), " is marked as a view (", kAliasAttr, ") but its output '", n->output(0)->name(),
                     "' does not share its input '", n->input(0)->name(), "''s arena bytes");
    }
  }

  // In-place outputs: exactly their candidate input's arena bytes.
  for (auto& n : nodes) {
    const ir::Attribute* a = n->FindAttr(kInPlaceAttr);
    if (!a) continue;
    const int k = InPlaceCandidate(*n);
    if (a->kind != ir::Attribute::Kind::kInt || k < 0 || a->i != k) {
      return Corrupt(n->Describe(), " is marked in-place (", kInPlaceAttr, ") but only a Conv with a fused residual ",
                     "(kiln.sum = 1, input 3) may be, and only over input 3");
    }
    if (!same_arena_bytes(n->input(k), n->output(0))) {
      return Corrupt(n->Describe(), " is marked in-place (", kInPlaceAttr, ") but its output '", n->output(0)->name(),
                     "' does not take input ", k, " '", n->input(k)->name(), "''s arena bytes");
    }
  }

  // Lifetimes over the node order (as PlanMemory computes them): arena
  // tensors live at the same time must not share bytes, views and in-place
  // outputs excepted; what an in-place output overwrote is read no more.
  struct Live {
    std::uint64_t offset, end;
    int first, last;
    const ir::Value* value;
    int region;
  };
  std::vector<Live> groups;
  std::unordered_map<const ir::Value*, int> group_of;
  // In-place overwrites, per group: members joined in order, and the first
  // `overwritten[g]` of them were overwritten by node `overwriter[g]` (the
  // latest in-place node of the group). O(1) per read and per mark.
  std::vector<std::size_t> joined, overwritten;
  std::vector<int> overwriter;
  std::unordered_map<const ir::Value*, std::size_t> position;  // a member's place in its group
  auto join = [&](const ir::Value* v, int g) {
    group_of[v] = g;
    position[v] = joined[g]++;
  };
  for (int idx = 0; idx < static_cast<int>(nodes.size()); ++idx) {
    const ir::Node& n = *nodes[idx];
    // A value an earlier in-place node overwrote may not be read again.
    const ir::Value* stale = nullptr;
    ForEachRead(n, [&](const ir::Value* in) {
      auto it = group_of.find(in);
      if (!stale && it != group_of.end() && position[in] < overwritten[it->second]) stale = in;
    });
    if (stale) {
      return Corrupt(n.Describe(), " reads '", stale->name(), "', whose bytes ",
                     nodes[overwriter[group_of[stale]]]->Describe(), " overwrote in place (", kInPlaceAttr, ")");
    }
    for (const ir::Value* o : n.outputs()) {
      auto it = placed.find(o);
      if (it == placed.end() || (it->second->region != kRegionArena && it->second->region != host_region)) continue;
      const bool in_place = n.FindAttr(kInPlaceAttr) && o == n.output(0);
      const ir::Value* joins = nullptr;  // the value whose bytes `o` shares
      if (n.FindAttr(kAliasAttr)) joins = n.input(0);
      if (in_place) joins = n.input(InPlaceCandidate(n));
      if (joins) {
        auto src = group_of.find(joins);
        if (src == group_of.end() && in_place) {
          return Corrupt(n.Describe(), " is marked in-place (", kInPlaceAttr, ") over '", joins->name(),
                         "', which no earlier node wrote in this arena");
        }
        if (src != group_of.end()) {
          const int g = src->second;
          if (in_place) {
            const int k = InPlaceCandidate(n);
            for (int i = 0; i < n.num_inputs(); ++i) {
              auto gi = group_of.find(n.input(i));
              if (i != k && gi != group_of.end() && gi->second == g) {
                return Corrupt(n.Describe(), " is marked in-place (", kInPlaceAttr, ") but also reads input ", i, " '",
                               n.input(i)->name(), "', which shares the bytes it overwrites");
              }
            }
            overwritten[g] = joined[g];
            overwriter[g] = idx;
          }
          join(o, g);
          continue;
        }
      }
      groups.push_back({it->second->offset, it->second->offset + it->second->size, idx, idx, o, it->second->region});
      joined.push_back(0);
      overwritten.push_back(0);
      overwriter.push_back(-1);
      join(o, static_cast<int>(groups.size()) - 1);
    }
    ForEachRead(n, [&](const ir::Value* in) {
      auto it = group_of.find(in);
      if (it != group_of.end()) groups[it->second].last = std::max(groups[it->second].last, idx);
    });
  }
  // Each arena is exactly what its placements need (as PlanMemory sizes it),
  // and no more than all its tensors side by side: a hostile size (2^64-1,
  // or one that wraps when rounded) is refused before allocation.
  for (const bool host : {false, true}) {
    const int region = host ? host_region : kRegionArena;
    const char* what = host ? "host arena" : "arena";
    std::uint64_t total = 0;
    for (const Live& l : groups) {
      if (l.region != region) continue;
      const std::uint64_t aligned = (l.end - l.offset + kAlignment - 1) / kAlignment * kAlignment;  // <= 64 GiB
      if (!CheckedAddU(total, aligned, &total)) return Corrupt(what, " tensors' total size overflows");
    }
    const std::uint64_t reach = host ? host_need : arena_need;
    if (reach > total) {
      return Corrupt(what, " placements reach offset ", reach, ", past the ", total, " bytes of all ", what,
                     " tensors side by side");
    }
    const std::uint64_t need = (reach + kAlignment - 1) / kAlignment * kAlignment;  // reach <= total: no overflow
    const std::uint64_t size = host ? plan.host_arena_size : plan.arena_size;
    if (size != need) {
      return Corrupt("plan ", host ? "host_arena_size " : "arena_size ", size, " differs from the ", need, " bytes its ",
                     what, " placements need");
    }
  }
  std::vector<const Live*> order;
  for (const Live& l : groups) {
    if (l.end > l.offset) order.push_back(&l);
  }
  std::sort(order.begin(), order.end(), [](const Live* a, const Live* b) { return a->offset < b->offset; });
  for (std::size_t i = 0; i < order.size(); ++i) {
    const Live& a = *order[i];
    for (std::size_t j = i + 1; j < order.size() && order[j]->offset < a.end; ++j) {
      const Live& b = *order[j];
      if (a.region == b.region && a.first <= b.last && b.first <= a.last) {
        return Corrupt("arena tensors '", a.value->name(), "' (offset ", a.offset, " size ", a.end - a.offset,
                       ") and '", b.value->name(), "' (offset ", b.offset, " size ", b.end - b.offset,
                       ") share bytes while both are live (", nodes[std::max(a.first, b.first)]->Describe(), ")");
      }
    }
  }
  return Status::Ok();
}

}  // namespace kiln::plan
