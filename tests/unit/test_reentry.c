/* Re-entry: a signal handler that calls malloc or free while its thread is inside a
 * locked slow path must not deadlock or spin: malloc fails with ENOMEM, free leaks the
 * block with one message. Simulated by marking the thread as inside strata, and for
 * real with a signal delivered while the thread allocates in a loop. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "internal.h"
#include "unit.h"

static void test_reentered_slow_path_fails_instead_of_deadlocking(void) {
  void *big = strata_malloc(1 << 20); /* slow path: a large extent */
  CHECK(big != NULL);
  strata_tsd.reentrant = 1; /* as if a handler interrupted a locked section */
  errno = 0;
  void *p = strata_malloc(3 << 20);
  CHECK(p == NULL);
  CHECK_EQ(errno, ENOMEM);
  strata_free(big); /* leaked with a message, never a deadlock */
  strata_tsd.reentrant = 0;
  p = strata_malloc(3 << 20); /* and the thread carries on normally */
  CHECK(p != NULL);
  strata_free(p);
}

static volatile sig_atomic_t handled;
static void on_alarm(int sig) {
  (void)sig;
  int saved = errno; /* a well-behaved handler: malloc may fail with ENOMEM here */
  /* Not async-signal-safe by POSIX, done by real programs anyway: must not hang. */
  void *p = strata_malloc(100000);
  if (p) strata_free(p);
  handled++;
  errno = saved;
}

static void test_signal_handler_allocating_during_slow_paths_terminates(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it = {{0, 200}, {0, 200}}; /* every 200 us */
  setitimer(ITIMER_REAL, &it, NULL);
  for (int i = 0; i < 20000; i++) {
    void *p = strata_malloc(20000 + (size_t)(i % 7) * 4096); /* large: locked slow paths */
    if (p) strata_free(p);
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  CHECK(handled > 0);
}

int main(void) {
  if (strata_init()) return 1;
  printf("unit: reentry\n");
  RUN(test_reentered_slow_path_fails_instead_of_deadlocking);
  RUN(test_signal_handler_allocating_during_slow_paths_terminates);
  UNIT_EXIT();
}
