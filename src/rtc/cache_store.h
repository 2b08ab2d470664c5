// The on-disk store behind every RTC cache (CPU programs, CUDA programs):
// one file per entry, "<dir>/<key>.rtc", holding a log and a binary behind
// a SHA-256 checksum. Entries are written to a temporary name and renamed
// (concurrent processes are safe; the last rename wins), never fsynced (a
// torn entry fails its checksum and is rebuilt). A damaged entry, one not
// owned by this user or root, or one group/world-writable is not trusted:
// the caller treats it as a miss and replaces it.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::rtc::store {

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

bool WriteAll(int fd, const void* data, std::size_t n);
// Reads up to `max` bytes from the start of `fd`; *total gets the file size.
bool ReadFd(int fd, std::size_t max, std::string* out, std::uint64_t* total = nullptr);
// mkdir -p with 0700 for what it creates.
bool MakeDirs(const std::string& dir);

enum class ReadResult { kMiss, kHit, kUntrusted };
// kHit: log and binary hold the entry. kMiss: no readable file. kUntrusted:
// a file is there but damaged or not trusted (see above).
ReadResult ReadEntry(const std::string& path, std::string* log, std::vector<std::uint8_t>* binary);
// Best effort (false: not stored; a cache that cannot be written only costs
// compiles). Creates `dir` (0700) if needed.
bool WriteEntry(const std::string& dir, const std::string& path, const std::string& log,
                const std::vector<std::uint8_t>& binary);

}  // namespace kiln::rtc::store
