// The kernel's system-wide switch for FUSE over io_uring, for tests that
// need it on (UringSwitch(true)) or off (UringSwitch(false)). Tests run in
// parallel processes: those that need it on share a lock on a file, the one
// that turns it off takes the lock alone. The test that turns it on from off
// keeps the old value in the lock file, and the last test that needed it on
// puts that value back (whichever test that is: holders come and go in any
// order).
#ifndef SROUTE_TESTS_UTIL_URING_SWITCH_H_
#define SROUTE_TESTS_UTIL_URING_SWITCH_H_

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace sroute::testing {

class UringSwitch {
 public:
  static constexpr const char* kPath =
      "/sys/module/fuse/parameters/enable_uring";

  explicit UringSwitch(bool on) : on_(on) {
    std::ifstream in(kPath);
    if (!(in >> old_)) return;  // no such kernel feature
    lock_ = open("/tmp/sroute-test-enable_uring.lock",
                 O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_ < 0 || flock(lock_, on ? LOCK_SH : LOCK_EX) != 0) return;
    std::ifstream again(kPath);
    again >> old_;  // another test may have changed it meanwhile
    if (on && old_ != "Y") KeepOriginal(old_);
    ok_ = Write(on ? "Y" : "N");
  }
  ~UringSwitch() {
    if (lock_ < 0) return;
    if (ok_ && !on_ && old_ != "N") Write(old_);
    if (ok_ && on_ && flock(lock_, LOCK_EX | LOCK_NB) == 0) {
      // No other test needs it on.
      const std::string original = TakeOriginal();
      if (!original.empty()) Write(original);
    }
    close(lock_);
  }
  UringSwitch(const UringSwitch&) = delete;
  UringSwitch& operator=(const UringSwitch&) = delete;

  // False if this kernel has no FUSE over io_uring (or the switch could
  // not be set).
  bool ok() const { return ok_; }

 private:
  // The value before the tests turned the switch on, in the lock file.
  void KeepOriginal(const std::string& value) {
    (void)!ftruncate(lock_, 0);
    (void)!pwrite(lock_, value.data(), value.size(), 0);
  }
  std::string TakeOriginal() {
    char buf[16];
    const ssize_t n = pread(lock_, buf, sizeof(buf), 0);
    (void)!ftruncate(lock_, 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }
  static bool Write(const std::string& value) {
    std::ofstream out(kPath);
    out << value << "\n";
    out.close();
    return !out.fail();
  }

  bool on_;
  std::string old_;
  int lock_ = -1;
  bool ok_ = false;
};

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_URING_SWITCH_H_
