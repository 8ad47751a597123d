/* os_lock.c — the process-wide locks of os.h, the same on every platform:
 * only giving way to other threads (fw_os_yield) is the OS's. */
#include "os.h"

/* A recursive spin-then-yield lock on one word. */
void fw_lock_acquire(fw_lock_t *l) {
  uintptr_t me = fw_thread_id();
  if (atomic_load_explicit(&l->owner, memory_order_relaxed) == me) {
    l->depth++;
    return;
  }
  for (unsigned spin = 0;; spin++) {
    uintptr_t expected = 0;
    if (atomic_compare_exchange_weak_explicit(&l->owner, &expected, me, memory_order_acquire,
                                              memory_order_relaxed))
      return;
    if (spin >= 64) fw_os_yield();
  }
}

void fw_lock_release(fw_lock_t *l) {
  if (l->depth) {
    l->depth--;
    return;
  }
  atomic_store_explicit(&l->owner, 0, memory_order_release);
}

void fw_lock_reset(fw_lock_t *l) {
  l->depth = 0;
  atomic_store_explicit(&l->owner, 0, memory_order_relaxed);
}
