#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"

namespace edgetrain {

namespace {

std::string SystemError() { return std::strerror(errno); }

void SyncDirectoryOf(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  int dir_fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return;  // the file is in place; durability of the rename is best effort
  ::fsync(dir_fd);
  ::close(dir_fd);
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    temp_path_ = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  ET_CHECK(fd_ >= 0, ErrorCode::kIoError, "cannot write '", path_, "': ", SystemError());
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

void AtomicFileWriter::Write(const void* data, size_t nbytes) {
  const auto* src = static_cast<const uint8_t*>(data);
  size_t done = 0;
  while (done < nbytes) {
    ssize_t n = ::write(fd_, src + done, nbytes - done);
    if (n < 0 && errno == EINTR) continue;
    ET_CHECK(n > 0, ErrorCode::kIoError, "cannot write '", path_, "': ", SystemError());
    done += static_cast<size_t>(n);
  }
  position_ += nbytes;
}

void AtomicFileWriter::Pad(uint64_t alignment) {
  static constexpr uint8_t kZeros[8] = {};
  size_t padding = static_cast<size_t>((alignment - position_ % alignment) % alignment);
  Write(kZeros, padding);
}

void AtomicFileWriter::Sync() {
  ET_CHECK(::fsync(fd_) == 0, ErrorCode::kIoError, "cannot write '", path_, "': fsync: ", SystemError());
  int fd = fd_;
  fd_ = -1;
  ET_CHECK(::close(fd) == 0, ErrorCode::kIoError, "cannot write '", path_, "': close: ", SystemError());
}

namespace {
// Removes `<path>.tmp.<pid>.<n>` files of processes that no longer exist (killed during a save).
void RemoveStaleTemporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code error;
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) ::unlink(it->path().c_str());
  }
}
}  // namespace

void AtomicFileWriter::Commit() {
  if (fd_ >= 0) Sync();
  ET_CHECK(::rename(temp_path_.c_str(), path_.c_str()) == 0, ErrorCode::kIoError, "cannot write '", path_,
           "': rename: ", SystemError());
  committed_ = true;
  SyncDirectoryOf(path_);
  RemoveStaleTemporaries(path_);
}

void WriteFileAtomically(const std::string& path, const void* bytes, size_t nbytes) {
  AtomicFileWriter file(path);
  file.Write(bytes, nbytes);
  file.Commit();
}

}  // namespace edgetrain
