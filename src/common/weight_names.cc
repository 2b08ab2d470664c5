// Weight file names (see weight_ref.h).
#include <cstring>

#include "common/status.h"
#include "common/utf8.h"
#include "common/weight_ref.h"

namespace kiln::weights {

bool IsSha256Hex(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string ModelNameProblem(const std::string& name) {
  if (name.empty()) return "it is empty";
  if (name.size() > kMaxModelNameBytes) return StrCat("it is ", name.size(), " bytes long (at most ", kMaxModelNameBytes, ")");
  for (unsigned char c : name) {
    if (c == 0) return "it contains a NUL byte";
    if (c < 0x20 || c == 0x7f) return "it contains a control character";
    if (c == '/' || c == '\\') return "it contains a path separator";
  }
  if (name.find("..") != std::string::npos) return "it contains '..'";
  if (!IsValidUtf8(name)) return "it is not valid UTF-8";
  return {};
}

bool IsSingleName(const std::string& f) { return f.size() == 7 + 64 && f.rfind("weight_", 0) == 0 && IsSha256Hex(f.substr(7)); }

bool IsCombinedName(const std::string& f) {
  const std::size_t n = std::strlen(kCombinedSuffix);
  return f.size() > n && f.compare(f.size() - n, n, kCombinedSuffix) == 0 &&
         ModelNameProblem(f.substr(0, f.size() - n)).empty();
}

bool IsWeightFileName(const std::string& name) { return IsSingleName(name) || IsCombinedName(name); }

}  // namespace kiln::weights
