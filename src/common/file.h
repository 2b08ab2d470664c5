// Opening files that may have been planted by an attacker: only regular files
// are read (a FIFO, device or directory is refused without blocking), sizes
// are taken from the open descriptor, and reads are bounded.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kiln {

// An owned file descriptor (closed on destruction).
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();
  int get() const { return fd_; }
  int release() { int f = fd_; fd_ = -1; return f; }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

struct OpenedFile {
  UniqueFd fd;
  std::int64_t size = 0;
};

// Opens `path` read-only with O_NONBLOCK (so a FIFO cannot hang the open),
// checks with fstat that it is a regular file, then clears O_NONBLOCK. Errors
// name `what` and the path: kNotFound when it does not exist or cannot be
// opened, kInvalidArgument when it is not a regular file.
Result<OpenedFile> OpenRegularFile(const std::string& path, std::string_view what);

// Whole-file read through OpenRegularFile; refuses files larger than
// `max_bytes`.
Result<std::string> ReadRegularFile(const std::string& path, std::string_view what, std::int64_t max_bytes);

// pread loop: exactly `n` bytes at `offset`, or an error naming `what`
// (short file, I/O error with errno text).
Status PreadExact(int fd, void* dst, std::int64_t n, std::int64_t offset, std::string_view what);

// mmap(PROT_READ) of `size` bytes of `fd` (MAP_SHARED when `shared`, else
// MAP_PRIVATE); nullptr with errno set on failure. The mapping is advised
// MADV_NOHUGEPAGE: with page-cache folios mapped by 2 MiB PMDs, on a host
// running a memory monitor (DAMON), kernels touching only anonymous memory
// ran 1.2-2.8x slower in periodic bursts (likely: clearing a PMD's accessed
// bit flushes the whole process's TLB; bench/RESULTS.md, "File-mapped
// weights and periodic slow runs"). Weights read in place from
// the mapping are streamed once per run, where 4 KiB entries cost nothing
// measurable.
void* MapReadOnly(int fd, std::uint64_t size, bool shared);

}  // namespace kiln
