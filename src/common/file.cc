#include "common/file.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kiln {

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

Result<OpenedFile> OpenRegularFile(const std::string& path, std::string_view what) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int e = errno;
    return Error(StatusCode::kNotFound, what, ": cannot open '", path, "': ", std::strerror(e));
  }
  OpenedFile f{UniqueFd(fd), 0};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    return Error(StatusCode::kIoError, what, ": cannot stat '", path, "': ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISCHR(st.st_mode) ? "a character device" : S_ISBLK(st.st_mode) ? "a block device"
                     : S_ISSOCK(st.st_mode) ? "a socket" : "not a regular file";
    return Error(StatusCode::kInvalidArgument, what, ": '", path, "' is ", kind, ", not a regular file");
  }
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  f.size = static_cast<std::int64_t>(st.st_size);
  return f;
}

Status PreadExact(int fd, void* dst, std::int64_t n, std::int64_t offset, std::string_view what) {
  auto* p = static_cast<char*>(dst);
  std::int64_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, p + done, static_cast<std::size_t>(n - done), static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      return Error(StatusCode::kIoError, what, ": read of ", n, " bytes at offset ", offset, " failed: ",
                   std::strerror(e));
    }
    if (r == 0) {
      return Error(StatusCode::kCorrupt, what, ": file ends after ", offset + done, " bytes; expected ", n,
                   " bytes at offset ", offset);
    }
    done += r;
  }
  return Status::Ok();
}

Result<std::string> ReadRegularFile(const std::string& path, std::string_view what, std::int64_t max_bytes) {
  KILN_ASSIGN_OR_RETURN(OpenedFile f, OpenRegularFile(path, what));
  if (f.size > max_bytes) {
    return Error(StatusCode::kOutOfRange, what, ": '", path, "' is ", f.size, " bytes, more than the limit of ",
                 max_bytes);
  }
  std::string data(static_cast<std::size_t>(f.size), '\0');
  KILN_RETURN_IF_ERROR(PreadExact(f.fd.get(), data.data(), f.size, 0, StrCat(what, " '", path, "'")));
  return data;
}

void* MapReadOnly(int fd, std::uint64_t size, bool shared) {
  void* p = mmap(nullptr, static_cast<std::size_t>(size), PROT_READ, shared ? MAP_SHARED : MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) return nullptr;
  const int saved = errno;
  (void)madvise(p, static_cast<std::size_t>(size), MADV_NOHUGEPAGE);  // advice only: failure changes nothing
  errno = saved;
  return p;
}

}  // namespace kiln
