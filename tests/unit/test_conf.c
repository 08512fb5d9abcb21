/* Configuration parsing: every option, bad keys and values reported with the key, the
 * value and what is accepted, later settings winning, and defaults kept on error. */
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "unit.h"

/* Parse s into o, capturing what strata writes to stderr. */
static int parse_capture(opt_t *o, const char *s, char *out, size_t cap) {
  int fds[2];
  if (pipe(fds)) return -1;
  int saved = dup(2);
  dup2(fds[1], 2);
  int problems = conf_parse(o, s, "TEST");
  dup2(saved, 2);
  close(saved);
  close(fds[1]);
  ssize_t n = read(fds[0], out, cap - 1);
  out[n > 0 ? n : 0] = '\0';
  close(fds[0]);
  return problems;
}

static void test_good_options_parse(void) {
  opt_t o = opt;
  char msg[2048];
  int p = parse_capture(&o,
                        "narenas:3,tcache:false,tcache_max:1024,oversize_threshold:16M,retain:false,"
                        "junk:alloc,zero:true,abort:true,abort_conf:false,confirm_conf:true,dirty_decay_ms:500",
                        msg, sizeof(msg));
  CHECK_EQ(p, 0);
  CHECK_EQ(msg[0], '\0');
  CHECK_EQ(o.narenas, 3);
  CHECK(!o.tcache);
  CHECK_EQ(o.tcache_max, 1024);
  CHECK_EQ(o.oversize_threshold, (size_t)16 << 20);
  CHECK(!o.retain);
  CHECK_EQ(o.junk, JUNK_ALLOC);
  CHECK(o.zero && o.abort && !o.abort_conf && o.confirm_conf);
  CHECK_EQ(o.dirty_decay_ms, 500);
}

static void test_memory_return_options_parse(void) {
  opt_t o = opt;
  char msg[2048];
  int p = parse_capture(&o,
                        "muzzy_decay_ms:2500,background_thread:true,max_background_threads:3,thp:always,"
                        "metadata_thp:auto,limit_headroom:64M",
                        msg, sizeof(msg));
  CHECK_EQ(p, 0);
  CHECK_EQ(msg[0], '\0');
  CHECK_EQ(o.muzzy_decay_ms, 2500);
  CHECK(o.background_thread);
  CHECK_EQ(o.max_background_threads, 3);
  CHECK_EQ(o.thp, THP_ALWAYS);
  CHECK_EQ(o.metadata_thp, MTHP_AUTO);
  CHECK_EQ(o.limit_headroom, (uint64_t)64 << 20);
  p = parse_capture(&o, "muzzy_decay_ms:-1,thp:never,metadata_thp:always", msg, sizeof(msg));
  CHECK_EQ(p, 0);
  CHECK_EQ(o.muzzy_decay_ms, -1);
  CHECK_EQ(o.thp, THP_NEVER);
  CHECK_EQ(o.metadata_thp, MTHP_ALWAYS);
  parse_capture(&o, "thp:sometimes", msg, sizeof(msg));
  CHECK(strstr(msg, "invalid value \"sometimes\" for \"thp\" in TEST (accepted: default, always, never)") != NULL);
  parse_capture(&o, "metadata_thp:yes", msg, sizeof(msg));
  CHECK(strstr(msg, "(accepted: disabled, auto, always)") != NULL);
}

static void test_unknown_key_is_named_with_accepted_keys(void) {
  opt_t o = opt;
  char msg[2048];
  int p = parse_capture(&o, "narenaz:4", msg, sizeof(msg));
  CHECK_EQ(p, 1);
  CHECK(strstr(msg, "<strata>: conf: unknown option \"narenaz\" in TEST") != NULL);
  CHECK(strstr(msg, "(did you mean \"narenas\"?)") != NULL);
  /* one line, without the whole list of options */
  CHECK(strchr(msg, '\n') == msg + strlen(msg) - 1);
  CHECK(strstr(msg, "tcache") == NULL);
  p = parse_capture(&o, "completely_unrelated_name:4", msg, sizeof(msg));
  CHECK_EQ(p, 1);
  CHECK(strstr(msg, "unknown option \"completely_unrelated_name\" in TEST (every option: docs/jemalloc-compat.md)") != NULL);
  CHECK_EQ(o.narenas, opt.narenas);
}

static void test_bad_values_keep_defaults(void) {
  const char *bad[] = {"narenas:0", "narenas:-1", "narenas:abc", "narenas:5000", "tcache:yes",
                       "tcache_max:9M", "junk:maybe", "oversize_threshold:12Q", "dirty_decay_ms:-5",
                       "narenas:99999999999999999999999", "tcache_max:", "zero", "muzzy_decay_ms:-2",
                       "background_thread:yes", "max_background_threads:0", "max_background_threads:5000",
                       "thp:madvise", "metadata_thp:true", "limit_headroom:lots"};
  for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    opt_t o = opt;
    char msg[2048];
    int p = parse_capture(&o, bad[i], msg, sizeof(msg));
    if (p != 1) printf("  not rejected: %s\n", bad[i]);
    CHECK_EQ(p, 1);
    CHECK(strstr(msg, "<strata>: conf: ") != NULL);
    CHECK(strstr(msg, "accepted") != NULL);
    CHECK(memcmp(&o, &opt, sizeof(o)) == 0);
  }
  opt_t o = opt;
  char msg[2048];
  parse_capture(&o, "narenas:x", msg, sizeof(msg));
  CHECK(strstr(msg, "invalid value \"x\" for \"narenas\" in TEST (accepted: an integer from 1 to 4095)") != NULL);
}

static void test_later_settings_win_and_errors_do_not_stop_parsing(void) {
  opt_t o = opt;
  char msg[2048];
  int p = parse_capture(&o, "narenas:2,bogus:1,narenas:7, tcache:false", msg, sizeof(msg));
  CHECK_EQ(p, 1);
  CHECK_EQ(o.narenas, 7);
  CHECK(!o.tcache);
}

static void test_jemalloc_options_not_yet_supported_are_noted(void) {
  opt_t o = opt;
  char msg[2048];
  int p = parse_capture(&o, "percpu_arena:percpu", msg, sizeof(msg));
  CHECK_EQ(p, 0);
  CHECK(strstr(msg, "<strata>: conf: no effect in strata: option \"percpu_arena\" in TEST (") != NULL);
  /* a no-effect option's value is still checked for its kind */
  p = parse_capture(&o, "hpa:maybe", msg, sizeof(msg));
  CHECK_EQ(p, 1);
  CHECK(strstr(msg, "invalid value \"maybe\" for \"hpa\" in TEST (accepted: true, false)") != NULL);
  /* unknown experimental options are tolerated, as jemalloc does */
  p = parse_capture(&o, "experimental_something_new:1", msg, sizeof(msg));
  CHECK_EQ(p, 0);
}

static void test_jemalloc_options_with_a_meaning_parse(void) {
  opt_t o = opt;
  char msg[2048];
  int p = parse_capture(&o, "xmalloc:true,zero_realloc:alloc,experimental_infallible_new:true,stats_interval:1048576,"
                            "stats_interval_opts:J,lg_tcache_max:12,prof_leak_error:false", msg, sizeof(msg));
  CHECK_EQ(p, 0);
  CHECK(o.xmalloc && o.infallible_new);
  CHECK_EQ(o.zero_realloc, ZR_ALLOC);
  CHECK_EQ(o.stats_interval, 1048576);
  CHECK(strcmp(o.stats_interval_opts, "J") == 0);
  CHECK_EQ(o.tcache_max, 4096);
  p = parse_capture(&o, "zero_realloc:abort,stats_interval:-1", msg, sizeof(msg));
  CHECK_EQ(o.zero_realloc, ZR_ABORT);
  CHECK_EQ(o.stats_interval, -1);
  p = parse_capture(&o, "zero_realloc:never", msg, sizeof(msg));
  CHECK_EQ(p, 1);
  CHECK(strstr(msg, "(accepted: free, alloc, abort)") != NULL);
}

int main(void) {
  if (strata_init()) return 1;
  printf("unit: conf\n");
  RUN(test_good_options_parse);
  RUN(test_memory_return_options_parse);
  RUN(test_unknown_key_is_named_with_accepted_keys);
  RUN(test_jemalloc_options_with_a_meaning_parse);
  RUN(test_bad_values_keep_defaults);
  RUN(test_later_settings_win_and_errors_do_not_stop_parsing);
  RUN(test_jemalloc_options_not_yet_supported_are_noted);
  UNIT_EXIT();
}
