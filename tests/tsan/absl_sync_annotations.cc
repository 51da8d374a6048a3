// Tells ThreadSanitizer about Abseil's locks, which Debian's Abseil cannot (NVKV_TSAN builds
// only; tests/tsan/README.md).
//
// Debian's libabsl (20220623) is built without -fsanitize=thread, so the __tsan_mutex_*
// annotations in its mutex.cc and notification.cc are compiled out: absl::Mutex is atomics and
// futexes TSan never sees, a lock handoff creates no happens-before edge, and every field
// guarded by an absl::Mutex would be reported as a race. No suppression can fix that (the
// reports are in our code, not Abseil's). Instead the linker's --wrap (CMakeLists.txt, the
// NVKV_TSAN block) routes each call our code makes to one of the functions below, which
// annotates the call as Abseil's own TSan build does and then calls the real function:
//   - Lock/Unlock (and the Reader and Try forms): a lock acquire and release on the Mutex.
//   - CondVar waits and Mutex::Await*: a release before the call and an acquire after it (the
//     call drops and retakes the lock inside). Accesses during the call are ignored: Abseil
//     evaluates an Await Condition inside, in whichever thread runs the unlock, with the lock
//     held in fact but not in TSan's view.
//   - Notification: Notify releases on the object, a wait that saw the notification acquires.
// Limits: only calls from code linked with these flags are seen (Abseil's internal calls, e.g.
// a Notification's own Mutex, are not: the wrappers model them from outside). Mutex::LockWhen*
// and Notification::HasBeenNotified (inline) are not annotated: nvkv does not use them; a use
// would make TSan report false races, not hide real ones. A CondVar wait under a reader lock is
// modelled as a writer's.
#include <sanitizer/tsan_interface.h>

#include <string_view>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

#define NVKV_TSAN_STR2(x) #x
#define NVKV_TSAN_STR(x) NVKV_TSAN_STR2(x)
// The symbol names below (and the --wrap list in CMakeLists.txt) spell Debian's inline
// namespace, 7debian3.
static_assert(std::string_view(NVKV_TSAN_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME)) == "debian3",
              "Abseil's inline namespace changed: update the symbol names here and in "
              "CMakeLists.txt");

// Each real function, by its symbol (a member function takes `this` first), and its wrapper.
#define NVKV_TSAN_REAL(ret, name, symbol, ...) \
  extern "C" ret name(__VA_ARGS__) __asm__("__real_" symbol)
// (An asm label goes on a declaration, so the wrapper is declared, then defined.)
#define NVKV_TSAN_WRAP(ret, name, symbol, ...)                      \
  extern "C" ret name(__VA_ARGS__) __asm__("__wrap_" symbol); \
  extern "C" ret name(__VA_ARGS__)

using absl::CondVar;
using absl::Condition;
using absl::Duration;
using absl::Mutex;
using absl::Notification;
using absl::Time;

#define LOCK "_ZN4absl7debian35Mutex4LockEv"
#define UNLOCK "_ZN4absl7debian35Mutex6UnlockEv"
#define TRY_LOCK "_ZN4absl7debian35Mutex7TryLockEv"
#define READER_LOCK "_ZN4absl7debian35Mutex10ReaderLockEv"
#define READER_UNLOCK "_ZN4absl7debian35Mutex12ReaderUnlockEv"
#define AWAIT "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE"
#define AWAIT_TIMEOUT "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE"
#define WAIT "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE"
#define WAIT_TIMEOUT "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE"
#define WAIT_DEADLINE "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE"
#define NOTIFY "_ZN4absl7debian312Notification6NotifyEv"
#define NOTIFICATION_WAIT "_ZNK4absl7debian312Notification19WaitForNotificationEv"
#define NOTIFICATION_TIMEOUT \
  "_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE"
#define NOTIFICATION_DEADLINE \
  "_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE"

NVKV_TSAN_REAL(void, RealLock, LOCK, Mutex*);
NVKV_TSAN_REAL(void, RealUnlock, UNLOCK, Mutex*);
NVKV_TSAN_REAL(bool, RealTryLock, TRY_LOCK, Mutex*);
NVKV_TSAN_REAL(void, RealReaderLock, READER_LOCK, Mutex*);
NVKV_TSAN_REAL(void, RealReaderUnlock, READER_UNLOCK, Mutex*);
NVKV_TSAN_REAL(void, RealAwait, AWAIT, Mutex*, const Condition&);
NVKV_TSAN_REAL(bool, RealAwaitWithTimeout, AWAIT_TIMEOUT, Mutex*, const Condition&, Duration);
NVKV_TSAN_REAL(void, RealWait, WAIT, CondVar*, Mutex*);
NVKV_TSAN_REAL(bool, RealWaitWithTimeout, WAIT_TIMEOUT, CondVar*, Mutex*, Duration);
NVKV_TSAN_REAL(bool, RealWaitWithDeadline, WAIT_DEADLINE, CondVar*, Mutex*, Time);
NVKV_TSAN_REAL(void, RealNotify, NOTIFY, Notification*);
NVKV_TSAN_REAL(void, RealWaitForNotification, NOTIFICATION_WAIT, const Notification*);
NVKV_TSAN_REAL(bool, RealWaitForNotificationWithTimeout, NOTIFICATION_TIMEOUT,
               const Notification*, Duration);
NVKV_TSAN_REAL(bool, RealWaitForNotificationWithDeadline, NOTIFICATION_DEADLINE,
               const Notification*, Time);

namespace {

// Runs `wait`, which releases `mu` and holds it again when it returns, as TSan must see it.
template <typename Wait>
auto ReleasedDuring(Mutex* mu, Wait wait) {
  __tsan_mutex_pre_unlock(mu, 0);  // release; ignores accesses until post_unlock
  auto result = wait();
  __tsan_mutex_post_unlock(mu, 0);
  __tsan_mutex_pre_lock(mu, 0);
  __tsan_mutex_post_lock(mu, 0, 0);  // acquire
  return result;
}

}  // namespace

NVKV_TSAN_WRAP(void, WrapLock, LOCK, Mutex* mu) {
  __tsan_mutex_pre_lock(mu, 0);
  RealLock(mu);
  __tsan_mutex_post_lock(mu, 0, 0);
}

NVKV_TSAN_WRAP(void, WrapUnlock, UNLOCK, Mutex* mu) {
  __tsan_mutex_pre_unlock(mu, 0);
  RealUnlock(mu);
  __tsan_mutex_post_unlock(mu, 0);
}

NVKV_TSAN_WRAP(bool, WrapTryLock, TRY_LOCK, Mutex* mu) {
  __tsan_mutex_pre_lock(mu, __tsan_mutex_try_lock);
  const bool locked = RealTryLock(mu);
  __tsan_mutex_post_lock(mu, locked ? __tsan_mutex_try_lock : __tsan_mutex_try_lock_failed, 0);
  return locked;
}

NVKV_TSAN_WRAP(void, WrapReaderLock, READER_LOCK, Mutex* mu) {
  __tsan_mutex_pre_lock(mu, __tsan_mutex_read_lock);
  RealReaderLock(mu);
  __tsan_mutex_post_lock(mu, __tsan_mutex_read_lock, 0);
}

NVKV_TSAN_WRAP(void, WrapReaderUnlock, READER_UNLOCK, Mutex* mu) {
  __tsan_mutex_pre_unlock(mu, __tsan_mutex_read_lock);
  RealReaderUnlock(mu);
  __tsan_mutex_post_unlock(mu, __tsan_mutex_read_lock);
}

NVKV_TSAN_WRAP(void, WrapAwait, AWAIT, Mutex* mu, const Condition& cond) {
  ReleasedDuring(mu, [&] {
    RealAwait(mu, cond);
    return true;
  });
}

NVKV_TSAN_WRAP(bool, WrapAwaitWithTimeout, AWAIT_TIMEOUT, Mutex* mu, const Condition& cond,
               Duration timeout) {
  return ReleasedDuring(mu, [&] { return RealAwaitWithTimeout(mu, cond, timeout); });
}

NVKV_TSAN_WRAP(void, WrapWait, WAIT, CondVar* cv, Mutex* mu) {
  ReleasedDuring(mu, [&] {
    RealWait(cv, mu);
    return true;
  });
}

NVKV_TSAN_WRAP(bool, WrapWaitWithTimeout, WAIT_TIMEOUT, CondVar* cv, Mutex* mu,
               Duration timeout) {
  return ReleasedDuring(mu, [&] { return RealWaitWithTimeout(cv, mu, timeout); });
}

NVKV_TSAN_WRAP(bool, WrapWaitWithDeadline, WAIT_DEADLINE, CondVar* cv, Mutex* mu,
               Time deadline) {
  return ReleasedDuring(mu, [&] { return RealWaitWithDeadline(cv, mu, deadline); });
}

NVKV_TSAN_WRAP(void, WrapNotify, NOTIFY, Notification* n) {
  __tsan_release(n);
  RealNotify(n);
}

NVKV_TSAN_WRAP(void, WrapWaitForNotification, NOTIFICATION_WAIT, const Notification* n) {
  RealWaitForNotification(n);
  __tsan_acquire(const_cast<Notification*>(n));
}

NVKV_TSAN_WRAP(bool, WrapWaitForNotificationWithTimeout, NOTIFICATION_TIMEOUT,
               const Notification* n, Duration timeout) {
  const bool notified = RealWaitForNotificationWithTimeout(n, timeout);
  if (notified) __tsan_acquire(const_cast<Notification*>(n));
  return notified;
}

NVKV_TSAN_WRAP(bool, WrapWaitForNotificationWithDeadline, NOTIFICATION_DEADLINE,
               const Notification* n, Time deadline) {
  const bool notified = RealWaitForNotificationWithDeadline(n, deadline);
  if (notified) __tsan_acquire(const_cast<Notification*>(n));
  return notified;
}
