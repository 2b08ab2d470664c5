// FileConstant <-> constant conversion at compile time.
//
// RejectInternalOps (first in the pipeline): a graph to compile may not hold
// Kiln's internal ops (FileConstant, ...); they are created only by the
// passes below. (ONNX external data is read by the importer, inside the
// model's directory only.)
// ExternalizeConstants (after optimisation): every non-empty constant, in
// the main graph and in every subgraph (If branches), is stored in an
// external weight directory and replaced by a FileConstant in its graph.
#include <set>

#include "ops/op_registry.h"
#include "passes/pass_manager.h"
#include "weights/path.h"

namespace kiln::passes {

Status RejectInternalOps(ir::Graph& g, const PassOptions&) {
  for (auto& n : g.nodes()) {
    if (n->domain() == "kiln") {
      return Error(StatusCode::kInvalidArgument, n->Describe(), " is in domain 'kiln', which is internal to Kiln: "
                   "a graph to compile may not contain it");
    }
  }
  return Status::Ok();
}

Result<std::vector<weights::WeightRecord>> ExternalizeConstants(ir::Graph& g, const std::string& dir,
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
    const weights::WeightRecord& r = records[i];
    const HostTensor& t = *blobs[i];
    v->set_constant(nullptr);
    ir::Node* n = owner->AddNode("FileConstant", v->name(), {}, {v}, "kiln");
    n->set_since_version(1);
    n->SetAttr("location", ir::Attribute::String(r.file));
    n->SetAttr("offset", ir::Attribute::Int(static_cast<std::int64_t>(r.offset)));
    n->SetAttr("length", ir::Attribute::Int(static_cast<std::int64_t>(r.length)));
    n->SetAttr("dtype", ir::Attribute::Int(static_cast<std::int64_t>(t.dtype())));
    n->SetAttr("shape", ir::Attribute::Ints(t.shape()));
    n->SetAttr("kiln.sha256", ir::Attribute::String(r.sha256));
    KILN_RETURN_IF_ERROR(ops::InferNode(*n));
    touched.insert(owner);
  }
  touched.insert(&g);
  for (ir::Graph* t : touched) KILN_RETURN_IF_ERROR(t->TopologicalSort());
  return records;
}

Status RelocateFileConstants(ir::Graph& g, const std::vector<weights::WeightRecord>& records) {
  std::map<std::string, const weights::WeightRecord*> by_hash;
  for (auto& r : records) by_hash[r.sha256] = &r;
  Status st = Status::Ok();
  ir::ForEachGraph(g, [&](ir::Graph& sub) {
    for (auto& n : sub.nodes()) {
      if (!st.ok() || n->op_type() != "FileConstant" || n->domain() != "kiln") continue;
      auto it = by_hash.find(n->GetString("kiln.sha256", ""));
      if (it == by_hash.end()) {
        st = Error(StatusCode::kInternal, n->Describe(), ": no record for its weight");
        continue;
      }
      n->SetAttr("location", ir::Attribute::String(it->second->file));
      n->SetAttr("offset", ir::Attribute::Int(static_cast<std::int64_t>(it->second->offset)));
    }
  });
  return st;
}

}  // namespace kiln::passes
