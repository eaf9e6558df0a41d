// The kernel's system-wide switch for FUSE over io_uring, for tests that
// need it on (UringSwitch(true)) or off (UringSwitch(false)). Tests run in
// parallel processes: those that need it on share a lock on a file, the one
// that turns it off takes the lock alone. A test that turned it on puts the
// old value back when no other test holds the lock.
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
    ok_ = Write(on ? "Y" : "N");
  }
  ~UringSwitch() {
    if (lock_ < 0) return;
    const std::string wanted = on_ ? "Y" : "N";
    if (ok_ && old_ != wanted) {
      if (!on_) {
        Write(old_);
      } else if (flock(lock_, LOCK_EX | LOCK_NB) == 0) {
        Write(old_);  // no other test needs it on
      }
    }
    close(lock_);
  }
  UringSwitch(const UringSwitch&) = delete;
  UringSwitch& operator=(const UringSwitch&) = delete;

  // False if this kernel has no FUSE over io_uring (or the switch could
  // not be set).
  bool ok() const { return ok_; }

 private:
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
