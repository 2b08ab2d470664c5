// FileConstant <-> constant conversion at compile time.
//
// LoadFileConstants (the reverse pass, first in the pipeline): FileConstant
// nodes that carry kiln.base_dir (ONNX external data) are read, inside that
// directory only and bounds-checked, into ordinary constants, so folding and
// fusion see their values.
// ExternalizeConstants (after optimisation): every non-empty constant is
// stored in an external weight directory and replaced by a FileConstant.
#include <fstream>

#include "ops/op_registry.h"
#include "passes/pass_manager.h"
#include "weights/path.h"

namespace kiln::passes {

Status LoadFileConstants(ir::Graph& g, const PassOptions&) {
  std::vector<ir::Node*> fcs;
  for (auto& n : g.nodes()) {
    if (n->op_type() == "FileConstant" && n->domain() == "kiln" && n->HasAttr("kiln.base_dir")) fcs.push_back(n.get());
  }
  for (ir::Node* n : fcs) {
    KILN_RETURN_IF_ERROR(ops::InferNode(*n));
    const std::string what = StrCat("initializer '", n->name(), "'");
    KILN_ASSIGN_OR_RETURN(auto path, weights::ResolveInside(n->GetString("kiln.base_dir", ""),
                                                            n->GetString("location", ""), what));
    const auto offset = static_cast<std::uint64_t>(n->GetInt("offset", 0));
    const auto length = static_cast<std::uint64_t>(n->GetInt("length", 0));
    std::error_code ec;
    const std::uint64_t size = std::filesystem::file_size(path, ec);
    if (ec) return Error(StatusCode::kNotFound, what, ": cannot open external data '", path.string(), "'");
    if (offset > size || length > size - offset) {
      return Error(StatusCode::kInvalidArgument, what, ": external data [", offset, ", +", length, ") exceeds '",
                   path.string(), "' (", size, " bytes)");
    }
    ir::Value* out = n->output(0);
    auto t = std::make_shared<HostTensor>(out->dtype(), out->shape());
    std::ifstream f(path, std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    f.read(static_cast<char*>(t->mutable_data()), static_cast<std::streamsize>(length));
    if (!f) return Error(StatusCode::kIoError, what, ": reading '", path.string(), "' failed");
    g.RemoveNode(n);
    out->set_constant(t);
  }
  return Status::Ok();
}

Result<std::vector<weights::WeightRecord>> ExternalizeConstants(ir::Graph& g, const std::string& dir,
                                                                const weights::StoreOptions& opts,
                                                                weights::StoreStats* stats) {
  std::vector<ir::Value*> consts;
  std::vector<HostTensorPtr> blobs;
  for (auto& v : g.values()) {
    if (v->is_constant() && v->constant()->nbytes() > 0) {
      consts.push_back(v.get());
      blobs.push_back(v->constant());
    }
  }
  KILN_ASSIGN_OR_RETURN(auto records, weights::StoreWeights(dir, blobs, opts, stats));
  for (std::size_t i = 0; i < consts.size(); ++i) {
    ir::Value* v = consts[i];
    const weights::WeightRecord& r = records[i];
    const HostTensor& t = *blobs[i];
    v->set_constant(nullptr);
    ir::Node* n = g.AddNode("FileConstant", v->name(), {}, {v}, "kiln");
    n->set_since_version(1);
    n->SetAttr("location", ir::Attribute::String(r.file));
    n->SetAttr("offset", ir::Attribute::Int(static_cast<std::int64_t>(r.offset)));
    n->SetAttr("length", ir::Attribute::Int(static_cast<std::int64_t>(r.length)));
    n->SetAttr("dtype", ir::Attribute::Int(static_cast<std::int64_t>(t.dtype())));
    n->SetAttr("shape", ir::Attribute::Ints(t.shape()));
    n->SetAttr("kiln.sha256", ir::Attribute::String(r.sha256));
    KILN_RETURN_IF_ERROR(ops::InferNode(*n));
  }
  KILN_RETURN_IF_ERROR(g.TopologicalSort());
  return records;
}

Status RelocateFileConstants(ir::Graph& g, const std::vector<weights::WeightRecord>& records) {
  std::map<std::string, const weights::WeightRecord*> by_hash;
  for (auto& r : records) by_hash[r.sha256] = &r;
  for (auto& n : g.nodes()) {
    if (n->op_type() != "FileConstant" || n->domain() != "kiln") continue;
    auto it = by_hash.find(n->GetString("kiln.sha256", ""));
    if (it == by_hash.end()) return Error(StatusCode::kInternal, n->Describe(), ": no record for its weight");
    n->SetAttr("location", ir::Attribute::String(it->second->file));
    n->SetAttr("offset", ir::Attribute::Int(static_cast<std::int64_t>(it->second->offset)));
  }
  return Status::Ok();
}

}  // namespace kiln::passes
