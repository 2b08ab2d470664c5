#include "weights/sha256.h"

#include <openssl/evp.h>

#include <memory>
#include <vector>

#include "common/file.h"

namespace kiln::weights {
namespace {

std::string Hex(const unsigned char* md, unsigned len) {
  static const char* kHex = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned i = 0; i < len; ++i) {
    out[2 * i] = kHex[md[i] >> 4];
    out[2 * i + 1] = kHex[md[i] & 15];
  }
  return out;
}

}  // namespace

std::string Sha256Hex(const void* data, std::size_t size) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data, size, md, &len, EVP_sha256(), nullptr);
  return Hex(md, len);
}


Result<std::string> Sha256OfFileRange(int fd, std::uint64_t offset, std::uint64_t length, const std::string& what) {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return Error(StatusCode::kInternal, "SHA-256 context for ", what, " could not be created");
  }
  constexpr std::uint64_t kChunk = 4u << 20;
  std::vector<unsigned char> buf(static_cast<std::size_t>(std::min(length, kChunk)));
  for (std::uint64_t done = 0; done < length;) {
    const std::uint64_t n = std::min(length - done, kChunk);
    KILN_RETURN_IF_ERROR(PreadExact(fd, buf.data(), static_cast<std::int64_t>(n),
                                    static_cast<std::int64_t>(offset + done), what));
    EVP_DigestUpdate(ctx.get(), buf.data(), n);
    done += n;
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  return Hex(md, len);
}

}  // namespace kiln::weights
