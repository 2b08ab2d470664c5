// See cache_store.h.
#include "rtc/cache_store.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "weights/sha256.h"

namespace kiln::rtc::store {

bool WriteAll(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool ReadFd(int fd, std::size_t max, std::string* out, std::uint64_t* total) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return false;
  std::uint64_t size = static_cast<std::uint64_t>(st.st_size);
  if (total) *total = size;
  out->resize(static_cast<std::size_t>(std::min<std::uint64_t>(size, max)));
  std::size_t got = 0;
  while (got < out->size()) {
    ssize_t r = ::pread(fd, out->data() + got, out->size() - got, static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  out->resize(got);
  return true;
}

// "KILNRTC1", u64 log size, u64 binary size, 64 hex SHA-256 of the payload,
// then the payload: log bytes, binary bytes.

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'R', 'T', 'C', '1'};
constexpr std::size_t kHeaderSize = 8 + 8 + 8 + 64;

ReadResult ReadEntry(const std::string& path, std::string* log, std::vector<std::uint8_t>* binary) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (fd.get() < 0) return ReadResult::kMiss;  // (or unreadable: same thing)
  struct stat st;
  bool trusted = ::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) &&
                 (st.st_uid == ::geteuid() || st.st_uid == 0) && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0 &&
                 static_cast<std::uint64_t>(st.st_size) >= kHeaderSize &&
                 static_cast<std::uint64_t>(st.st_size) < (std::uint64_t{1} << 32);
  std::string bytes;
  if (!trusted || !ReadFd(fd.get(), static_cast<std::size_t>(st.st_size), &bytes) ||
      bytes.size() != static_cast<std::size_t>(st.st_size)) {
    return ReadResult::kUntrusted;
  }
  std::uint64_t log_size = 0, bin_size = 0;
  std::memcpy(&log_size, bytes.data() + 8, 8);
  std::memcpy(&bin_size, bytes.data() + 16, 8);
  const std::size_t payload = bytes.size() - kHeaderSize;
  if (std::memcmp(bytes.data(), kMagic, 8) != 0 || log_size > payload || bin_size != payload - log_size ||
      weights::Sha256Hex(bytes.data() + kHeaderSize, payload) != std::string_view(bytes.data() + 24, 64)) {
    return ReadResult::kUntrusted;
  }
  log->assign(bytes.data() + kHeaderSize, log_size);
  const char* b = bytes.data() + kHeaderSize + log_size;
  binary->assign(b, b + bin_size);
  return ReadResult::kHit;
}

bool MakeDirs(const std::string& dir) {
  std::string cur;
  std::size_t b = 0;
  while (b < dir.size()) {
    std::size_t e = dir.find('/', b);
    if (e == std::string::npos) e = dir.size();
    cur = dir.substr(0, e);
    if (!cur.empty() && ::mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST) return false;
    b = e + 1;
  }
  struct stat st;
  return ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool WriteEntry(const std::string& dir, const std::string& path, const std::string& log,
                const std::vector<std::uint8_t>& binary) {
  if (!MakeDirs(dir)) return false;
  std::string bytes(kHeaderSize, '\0');
  std::uint64_t log_size = log.size(), bin_size = binary.size();
  std::memcpy(bytes.data(), kMagic, 8);
  std::memcpy(bytes.data() + 8, &log_size, 8);
  std::memcpy(bytes.data() + 16, &bin_size, 8);
  bytes += log;
  bytes.append(reinterpret_cast<const char*>(binary.data()), binary.size());
  std::string sum = weights::Sha256Hex(bytes.data() + kHeaderSize, bytes.size() - kHeaderSize);
  std::memcpy(bytes.data() + 24, sum.data(), 64);

  std::string tmp = path + ".tmp.XXXXXX";
  Fd fd(::mkostemp(tmp.data(), O_CLOEXEC));  // 0600
  if (fd.get() < 0) return false;
  bool ok = WriteAll(fd.get(), bytes.data(), bytes.size());
  ok = (::close(fd.release()) == 0) && ok;
  // No fsync: a torn entry fails its checksum and is recompiled.
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace kiln::rtc::store
