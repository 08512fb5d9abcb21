/*
 * conf_fuzz.c - libFuzzer target for the MALLOC_CONF parser (conf_parse, linked from the
 * prefixed build's sources): it must never crash or read out of bounds (ASan), and every
 * problem it counts must be one message line that names a key in quotes.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char text[1 << 16], out[1 << 17];
  if (size >= sizeof(text)) size = sizeof(text) - 1;
  memcpy(text, data, size);
  text[size] = '\0';
  int fds[2];
  if (pipe2(fds, O_NONBLOCK) != 0) abort();
  fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);
  int saved = dup(2);
  dup2(fds[1], 2);
  opt_t o = opt;
  int problems = conf_parse(&o, text, "fuzz");
  dup2(saved, 2);
  close(saved);
  close(fds[1]);
  ssize_t n = read(fds[0], out, sizeof(out) - 1);
  close(fds[0]);
  out[n > 0 ? n : 0] = '\0';
  int lines = 0;
  for (char *l = out; *l; lines++) {
    char *e = strchr(l, '\n');
    if (!e) abort(); /* every message ends its line */
    *e = '\0';
    /* "<strata>: conf: WHAT "KEY" in fuzz (WHAT IS ACCEPTED, A SUGGESTION OR WHY)" */
    if (strncmp(l, "<strata>: conf: ", 16) != 0 || strstr(l, "\" in fuzz (") == NULL || e[-1] != ')') {
      fprintf(stderr, "conf_fuzz: message does not name its key: %s\n", l);
      abort();
    }
    /* jemalloc's options with no meaning here get a note, never a problem */
    if (strncmp(l, "<strata>: conf: no effect in strata", 35) == 0) lines--;
    l = e + 1;
  }
  if (lines != problems) {
    fprintf(stderr, "conf_fuzz: %d problems but %d messages\n", problems, lines);
    abort();
  }
  return 0;
}
