/* A library preloaded before strata whose constructor calls dlsym, dlerror and calloc:
 * glibc's dlsym/dlerror allocate, so strata is initialised from inside the loader's
 * constructor phase (PITFALLS: "Interposition and start-up"). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((constructor)) static void early(void) {
  void *(*real_calloc)(size_t, size_t) = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
  (void)dlerror();
  dlsym(RTLD_DEFAULT, "no_such_symbol_strata_test");
  const char *err = dlerror(); /* allocates its message */
  char *p = calloc(4, 1000);
  if (!p || !err || (real_calloc == NULL)) {
    fputs("preload_dlsym_lib: setup failed\n", stderr);
    _exit(3);
  }
  for (int i = 0; i < 4000; i++) {
    if (p[i]) _exit(4); /* calloc must zero */
  }
  free(p);
}
