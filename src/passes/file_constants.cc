// FileConstant <-> constant conversion at compile time.
//
// RejectInternalOps (first in the pipeline): a graph to compile may not hold
// Kiln's internal ops (FileConstant, ...); they are created only by the
// passes below, except FileConstants with a file_id that the graph API
// makes (Graph::AddFileConstant). (ONNX external data is read by the importer, inside the
// model's directory only.)
// ExternalizeConstants (after optimisation): every non-empty constant, in
// the main graph and in every subgraph (If branches), is stored in an
// external weight directory and replaced by a FileConstant in its graph.
#include <set>

#include "ops/file_constant.h"
#include "ops/op_registry.h"
#include "passes/pass_manager.h"
#include "weights/path.h"

namespace kiln::passes {

Status RejectInternalOps(ir::Graph& g, const PassOptions&) {
  for (auto& n : g.nodes()) {
    // A file_id FileConstant is the graph API's (Graph::AddFileConstant):
    // the caller resolves it at load, so it names no file of Kiln's.
    if (ops::IsFileConstant(*n) && !n->HasAttr("location") && n->HasAttr("file_id")) {
      KILN_RETURN_IF_ERROR(ops::DecodeFileConstant(*n).status());
      continue;
    }
    if (n->domain() == "kiln") {
      return Error(StatusCode::kInvalidArgument, n->Describe(), " is in domain 'kiln', which is internal to Kiln: "
                   "a graph to compile may not contain it");
    }
  }
  return Status::Ok();
}

Result<std::vector<weights::WeightRef>> ExternalizeConstants(ir::Graph& g, const std::string& dir,
                                                                const weights::StoreOptions& opts,
                                                                weights::StoreStats* stats) {
  // Every graph's constants, If branches and Loop bodies included: they
  // follow the external-weight mode like the main graph's.
  std::vector<std::pair<ir::Graph*, ir::Value*>> consts;
  std::vector<HostTensorPtr> blobs;
  ir::ForEachGraph(g, [&](ir::Graph& sub) {
    for (auto& v : sub.values()) {
      if (v->is_constant() && v->constant()->nbytes() > 0) {
        consts.push_back({&sub, v.get()});
        blobs.push_back(v->constant());
      }
    }
  });
  KILN_ASSIGN_OR_RETURN(auto records, weights::StoreWeights(dir, blobs, opts, stats));
  std::set<ir::Graph*> touched;
  for (std::size_t i = 0; i < consts.size(); ++i) {
    auto [owner, v] = consts[i];
    weights::WeightRef r = records[i];
    const HostTensor& t = *blobs[i];
    r.dtype = t.dtype();
    r.shape = t.shape();
    v->set_constant(nullptr);
    ir::Node* n = owner->AddNode("FileConstant", v->name(), {}, {v}, "kiln");
    n->set_since_version(1);
    ops::EncodeFileConstant(*n, r);
    KILN_RETURN_IF_ERROR(ops::InferNode(*n));
    touched.insert(owner);
  }
  touched.insert(&g);
  for (ir::Graph* t : touched) KILN_RETURN_IF_ERROR(t->TopologicalSort());
  return records;
}

Status RelocateFileConstants(ir::Graph& g, const std::vector<weights::WeightRef>& records) {
  std::map<std::string, const weights::WeightRef*> by_hash;
  for (auto& r : records) by_hash[r.sha256] = &r;
  Status st = Status::Ok();
  ir::ForEachGraph(g, [&](ir::Graph& sub) {
    for (auto& n : sub.nodes()) {
      if (!st.ok() || !ops::IsFileConstant(*n) || !n->HasAttr("location")) continue;  // (file_id: the caller's)
      auto it = by_hash.find(n->GetString("kiln.sha256", ""));
      if (it == by_hash.end()) {
        st = Error(StatusCode::kInternal, n->Describe(), ": no record for its weight");
        continue;
      }
      auto r = ops::DecodeFileConstant(*n);
      if (!r.ok()) {
        st = r.status();
        continue;
      }
      r.value().location = it->second->location;
      r.value().offset = it->second->offset;
      ops::EncodeFileConstant(*n, r.value());
    }
  });
  return st;
}

}  // namespace kiln::passes
