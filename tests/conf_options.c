/*
 * conf_options.c - strata's option parsing, checked from outside: runs conf_probe under
 * MALLOC_CONF / STRATA_CONF / the malloc_conf symbol and checks the reports on stderr
 * (exact formats from the project's contract), abort_conf, confirm_conf, the precedence
 * of the sources and that narenas, tcache and zero take effect.
 */
#define _GNU_SOURCE
#include "check.h"

#ifndef CONF_PROBE
#error "CONF_PROBE must name the conf_probe program"
#endif

typedef struct {
    unsigned narenas, arenas;
    int tcache;
} probe_out_t;

static check_child_t run_result;

/* Runs a probe with exactly the given allocator variables (others unset). */
static check_child_t *run(const char *probe, const char *arg, const char *malloc_conf,
                          const char *strata_conf)
{
    static char mc[4096], sc[512];
    const char *env[5] = {"MALLOC_CONF", "STRATA_CONF", NULL, NULL, NULL};
    int n = 2;
    if (malloc_conf) {
        snprintf(mc, sizeof mc, "MALLOC_CONF=%s", malloc_conf);
        env[n++] = mc;
    }
    if (strata_conf) {
        snprintf(sc, sizeof sc, "STRATA_CONF=%s", strata_conf);
        env[n++] = sc;
    }
    char *argv[] = {(char *)probe, (char *)arg, NULL};
    CHECK(check_exec(argv, env, 30, &run_result) == 0, "cannot run %s", probe);
    return &run_result;
}

static probe_out_t parse(const check_child_t *r)
{
    probe_out_t p = {0, 0, -1};
    const char *s = strstr(r->out, "probe: ");
    CHECK(s && sscanf(s, "probe: narenas=%u arenas=%u tcache=%d ok", &p.narenas, &p.arenas,
                      &p.tcache) == 3,
          "probe did not finish (%s); stdout:\n%s\nstderr:\n%s", check_status_str(r->status),
          r->out, r->err);
    return p;
}

static probe_out_t run_ok(const char *probe, const char *mc, const char *sc)
{
    check_child_t *r = run(probe, NULL, mc, sc);
    CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0,
          "probe with MALLOC_CONF=%s STRATA_CONF=%s ended with %s; stderr:\n%s", mc ? mc : "-",
          sc ? sc : "-", check_status_str(r->status), r->err);
    return parse(r);
}

/* Number of lines of stderr that start with prefix. */
static int count_lines(const char *text, const char *prefix)
{
    int n = 0;
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        n += strncmp(l, prefix, strlen(prefix)) == 0;
    return n;
}

/* The line of text that contains needle, copied to buf (or NULL). */
static const char *line_with(const char *text, const char *needle, char *buf, size_t len)
{
    const char *m = strstr(text, needle);
    if (!m)
        return NULL;
    const char *start = m;
    while (start > text && start[-1] != '\n')
        start--;
    const char *end = strchr(m, '\n');
    size_t n = end ? (size_t)(end - start) : strlen(start);
    n = n < len - 1 ? n : len - 1;
    memcpy(buf, start, n);
    buf[n] = '\0';
    return buf;
}

static unsigned default_narenas(void) { return run_ok(CONF_PROBE, NULL, NULL).narenas; }

TEST(test_conf_without_options_prints_nothing)
{
    check_child_t *r = run(CONF_PROBE, NULL, NULL, NULL);
    CHECK_CHILD_EXITED_0(r);
    CHECK(strstr(r->err, "<strata>") == NULL, "unexpected output:\n%s", r->err);
    probe_out_t p = parse(r);
    CHECK(p.narenas >= 1 && p.tcache == 1, "defaults: narenas %u tcache %d", p.narenas, p.tcache);
}

TEST(test_conf_unknown_option_is_reported_and_ignored)
{
    unsigned def = default_narenas();
    check_child_t *r = run(CONF_PROBE, NULL, "foo:1", NULL);
    CHECK_CHILD_EXITED_0(r);
    char line[1024];
    const char *want = "<strata>: conf: unknown option \"foo\" in MALLOC_CONF (";
    CHECK(line_with(r->err, want, line, sizeof line), "no \"%s...\" line; stderr:\n%s", want,
          r->err);
    CHECK(strncmp(line, want, strlen(want)) == 0, "report does not start the line: %s", line);
    CHECK(strstr(line, "docs/jemalloc-compat.md") && !strstr(line, "tcache") && line[strlen(line) - 1] == ')',
          "the report does not say where the options are, or lists them: %s", line);
    CHECK_EQ(parse(r).narenas, def);
}

TEST(test_conf_invalid_value_is_reported_and_default_kept)
{
    unsigned def = default_narenas();
    static const char *cases[][2] = {{"narenas:x", "narenas"}, {"tcache:maybe", "tcache"},
                                     {"narenas:-3", "narenas"}, {"narenas:", "narenas"},
                                     {"tcache_total_max:lots", "tcache_total_max"},
                                     {"slab_sizes:1-4096", "slab_sizes"}, {"slab_sizes:200-100:2", "slab_sizes"},
                                     {"slab_sizes:1-64:0", "slab_sizes"}, {"slab_sizes:1-64:2|", "slab_sizes"},
                                     {"slab_sizes:a-b:c", "slab_sizes"},
                                     {"tcache_nslots_small_max:0", "tcache_nslots_small_max"},
                                     {"tcache_nslots_small_min:9000", "tcache_nslots_small_min"},
                                     {"lg_tcache_nslots_mul:17", "lg_tcache_nslots_mul"},
                                     {"lg_tcache_flush_small_div:0", "lg_tcache_flush_small_div"},
                                     {"tcache_gc_incr_bytes:0", "tcache_gc_incr_bytes"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_child_t *r = run(CONF_PROBE, NULL, cases[i][0], NULL);
        CHECK_CHILD_EXITED_0(r);
        char want[256], line[1024];
        const char *value = strchr(cases[i][0], ':') + 1;
        snprintf(want, sizeof want, "<strata>: conf: invalid value \"%s\" for \"%s\" in MALLOC_CONF (accepted: ",
                 value, cases[i][1]);
        CHECK(line_with(r->err, want, line, sizeof line), "MALLOC_CONF=%s: no \"%s...\" line; stderr:\n%s",
              cases[i][0], want, r->err);
        probe_out_t p = parse(r);
        CHECK(p.narenas == def && p.tcache == 1, "MALLOC_CONF=%s changed options: narenas %u tcache %d",
              cases[i][0], p.narenas, p.tcache);
    }
}

TEST(test_conf_reports_each_problem_once_and_applies_the_rest)
{
    check_child_t *r = run(CONF_PROBE, NULL, "foo:1,narenas:2,tcache:perhaps,bar:2", NULL);
    CHECK_CHILD_EXITED_0(r);
    int n = count_lines(r->err, "<strata>: conf: ");
    CHECK(n == 3, "%d report lines for 3 problems; stderr:\n%s", n, r->err);
    CHECK(strstr(r->err, "unknown option \"foo\"") && strstr(r->err, "unknown option \"bar\"") &&
              strstr(r->err, "invalid value \"perhaps\" for \"tcache\""),
          "stderr:\n%s", r->err);
    probe_out_t p = parse(r);
    CHECK(p.narenas == 2 && p.tcache == 1, "narenas %u tcache %d", p.narenas, p.tcache);
}

TEST(test_conf_report_names_its_source)
{
    check_child_t *r = run(CONF_PROBE, NULL, NULL, "foo:1");
    CHECK_CHILD_EXITED_0(r);
    CHECK(strstr(r->err, "<strata>: conf: unknown option \"foo\" in STRATA_CONF ("),
          "stderr:\n%s", r->err);
}

TEST(test_conf_abort_conf_makes_problems_fatal)
{
    static const char *cases[] = {"abort_conf:true,foo:1", "abort_conf:true,narenas:many",
                                  "foo:1,abort_conf:true"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_child_t *r = run(CONF_PROBE, NULL, cases[i], NULL);
        CHECK(WIFSIGNALED(r->status) && WTERMSIG(r->status) == SIGABRT,
              "MALLOC_CONF=%s: probe ended with %s, want SIGABRT; stderr:\n%s", cases[i],
              check_status_str(r->status), r->err);
        CHECK(strstr(r->err, "<strata>: conf: ") != NULL, "MALLOC_CONF=%s: nothing printed",
              cases[i]);
        CHECK(strstr(r->out, "probe:") == NULL, "the program ran");
    }
}

TEST(test_conf_abort_conf_with_valid_options_runs)
{
    probe_out_t p = run_ok(CONF_PROBE, "abort_conf:true,narenas:2", NULL);
    CHECK_EQ(p.narenas, 2);
}

TEST(test_conf_every_documented_option_is_accepted)
{
    const char *all = "abort_conf:true,narenas:2,tcache:true,tcache_max:4096,"
                      "oversize_threshold:16777216,retain:true,junk:false,zero:false,"
                      "abort:false,confirm_conf:false,dirty_decay_ms:10000,muzzy_decay_ms:0,"
                      "background_thread:false,max_background_threads:2,thp:default,"
                      "metadata_thp:disabled,limit_headroom:0,tcache_total_max:8M";
    check_child_t *r = run(CONF_PROBE, NULL, all, NULL);
    CHECK_CHILD_EXITED_0(r);
    CHECK(strstr(r->err, "<strata>") == NULL, "MALLOC_CONF=%s:\n%s", all, r->err);
}

/* Every option jemalloc 5.3 knows (its src/conf.c and manual), with a value of the kind it
 * takes: a program written for jemalloc runs under abort_conf:true, and each option strata
 * gives no meaning says so in exactly one line. */
TEST(test_conf_every_jemalloc_option_is_accepted_under_abort_conf)
{
    static const char *const meaningful =
        "abort_conf:true,abort:false,background_thread:false,confirm_conf:false,dirty_decay_ms:10000,"
        "experimental_infallible_new:false,junk:false,lg_prof_interval:-1,lg_prof_sample:19,lg_tcache_max:15,"
        "max_background_threads:4,metadata_thp:disabled,muzzy_decay_ms:0,narenas:4,oversize_threshold:8388608,"
        "prof:false,prof_accum:false,prof_active:true,prof_final:false,prof_gdump:false,prof_leak:false,"
        "prof_leak_error:false,prof_prefix:jeprof,prof_thread_active_init:true,retain:true,slab_sizes:1-4096:1,"
        "stats_interval:-1,"
        "stats_interval_opts:J,stats_print:false,stats_print_opts:J,tcache:true,tcache_max:32768,thp:default,"
        "xmalloc:false,zero:false,zero_realloc:free,lg_tcache_flush_large_div:1,lg_tcache_flush_small_div:1,"
        "lg_tcache_nslots_mul:1,tcache_gc_incr_bytes:65536,tcache_nslots_small_max:200,tcache_nslots_small_min:20";
    static const char *const noop[] = {
        "bin_shards:1-160:16", "cache_oblivious:false", "calloc_madvise_threshold:0",
        "debug_double_free_max_scan:32", "disable_large_size_classes:true", "dss:secondary",
        "experimental_hpa_enforce_hugify:false", "experimental_hpa_max_purge_nhp:-1",
        "experimental_hpa_start_huge_if_thp_always:true", "experimental_tcache_gc:true", "hpa:false",
        "hpa_dirty_mult:0.25", "hpa_hugification_threshold:1900000", "hpa_hugification_threshold_ratio:0.95",
        "hpa_hugify_delay_ms:10000", "hpa_hugify_style:lazy", "hpa_hugify_sync:false",
        "hpa_min_purge_delay_ms:0", "hpa_min_purge_interval_ms:5000", "hpa_purge_threshold:1",
        "hpa_purge_threshold_ratio:0.1", "hpa_sec_batch_fill_extra:0", "hpa_sec_bytes_after_flush:262144",
        "hpa_sec_max_alloc:32768", "hpa_sec_max_bytes:262144", "hpa_sec_nshards:4", "hpa_slab_max_alloc:65536",
        "huge_arena_pac_thp:false", "lg_extent_max_active_fit:6", "lg_san_uaf_align:-1",
        "log:core.malloc", "mutex_max_spin:600", "narenas_ratio:4", "percpu_arena:percpu",
        "process_madvise_max_batch:0", "prof_bt_max:128", "prof_log:false", "prof_pid_namespace:false",
        "prof_recent_alloc_max:-1", "prof_stats:false", "prof_sys_thread_name:false",
        "prof_time_resolution:default", "prof_unbias:true", "san_guard_large:0", "san_guard_small:0",
        "tcache_gc_delay_bytes:0", "tcache_ncached_max:1-1024:8", "tcache_nslots_large:20", "trust_madvise:false",
        "utrace:false"};
    static char all[4000];
    size_t n = (size_t)snprintf(all, sizeof all, "%s", meaningful);
    for (size_t i = 0; i < sizeof noop / sizeof noop[0]; i++)
        n += (size_t)snprintf(all + n, sizeof all - n, ",%s", noop[i]);
    CHECK(n < sizeof all - 1, "option string too long");
    check_child_t *r = run(CONF_PROBE, NULL, all, NULL);
    CHECK_CHILD_EXITED_0(r);
    int lines = count_lines(r->err, "<strata>: conf: no effect in strata: option \"");
    CHECK(lines == (int)(sizeof noop / sizeof noop[0]), "%d no-effect lines for %zu options; stderr:\n%s", lines,
          sizeof noop / sizeof noop[0], r->err);
    CHECK(count_lines(r->err, "<strata>") == lines, "other reports; stderr:\n%s", r->err);
    for (size_t i = 0; i < sizeof noop / sizeof noop[0]; i++) {
        char want[96];
        snprintf(want, sizeof want, "option \"%.*s\" in MALLOC_CONF (", (int)(strchr(noop[i], ':') - noop[i]),
                 noop[i]);
        CHECK(strstr(r->err, want), "no line for %s; stderr:\n%s", noop[i], r->err);
    }
    CHECK_EQ(parse(r).narenas, 4);
}

/* jemalloc's bin sizing options set where a thread's bins start: a small class's slab
 * regions << lg_tcache_nslots_mul, clamped to [tcache_nslots_small_min, _max]. */
TEST(test_conf_tcache_nslots_options_size_the_bins)
{
    static const char *cases[][2] = {
        {"", "nslots 64=200\nnslots 4096=20\n"},
        {"tcache_nslots_small_max:100,tcache_nslots_small_min:4", "nslots 64=100\nnslots 4096=8\n"},
        {"lg_tcache_nslots_mul:-4,tcache_nslots_small_min:1", "nslots 64=64\nnslots 4096=1\n"},
        {"tcache_nslots_small_min:500", "nslots 64=200\nnslots 4096=200\n"}, /* min above max: the max */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_child_t *r = run(CONF_PROBE, "nslots", cases[i][0], NULL);
        CHECK_CHILD_EXITED_0(r);
        CHECK(strstr(r->out, cases[i][1]), "MALLOC_CONF=%s: want\n%s; stdout:\n%s", cases[i][0], cases[i][1], r->out);
    }
}

TEST(test_conf_unknown_option_suggests_the_closest_name)
{
    check_child_t *r = run(CONF_PROBE, NULL, "narena:2,zero_realoc:free", NULL);
    CHECK_CHILD_EXITED_0(r);
    CHECK(strstr(r->err, "unknown option \"narena\" in MALLOC_CONF (did you mean \"narenas\"?)\n") &&
              strstr(r->err, "unknown option \"zero_realoc\" in MALLOC_CONF (did you mean \"zero_realloc\"?)\n"),
          "stderr:\n%s", r->err);
    CHECK_EQ(count_lines(r->err, "<strata>"), 2);
}

TEST(test_conf_confirm_conf_prints_effective_values)
{
    check_child_t *r =
        run(CONF_PROBE, NULL, "confirm_conf:true,narenas:3,tcache:false,lg_tcache_nslots_mul:-2", NULL);
    CHECK_CHILD_EXITED_0(r);
    CHECK(count_lines(r->err, "<strata>: conf: ") >= 1, "stderr:\n%s", r->err);
    char line[1024];
    CHECK(line_with(r->err, "narenas", line, sizeof line) && strstr(line, "<strata>: conf: ") == line &&
              strstr(line, "3"),
          "no confirmation line with narenas 3; stderr:\n%s", r->err);
    CHECK(line_with(r->err, "tcache", line, sizeof line) && strstr(line, "false"),
          "no confirmation line with tcache false; stderr:\n%s", r->err);
    CHECK(strstr(line, ",lg_tcache_nslots_mul:-2,") && strstr(line, ",tcache_nslots_small_max:200,"),
          "no confirmation of the bin sizing options; stderr:\n%s", r->err);
    probe_out_t p = parse(r);
    CHECK(p.narenas == 3 && p.tcache == 0);
}

TEST(test_conf_malloc_conf_symbol_is_read)
{
    CHECK_EQ(run_ok(CONF_PROBE_SYMBOL, NULL, NULL).narenas, 3);
}

TEST(test_conf_strata_conf_overrides_malloc_conf_symbol)
{
    CHECK_EQ(run_ok(CONF_PROBE_SYMBOL, NULL, "narenas:2").narenas, 2);
}

TEST(test_conf_malloc_conf_overrides_strata_conf)
{
    CHECK_EQ(run_ok(CONF_PROBE, "narenas:5", "narenas:2").narenas, 5);
    CHECK_EQ(run_ok(CONF_PROBE_SYMBOL, "narenas:5", "narenas:2").narenas, 5);
}

TEST(test_conf_malloc_conf_2_conf_harder_wins_over_every_source)
{
    CHECK_EQ(run_ok(CONF_PROBE_HARDER, NULL, NULL).narenas, 4);
    CHECK_EQ(run_ok(CONF_PROBE_HARDER, "narenas:5", "narenas:2").narenas, 4);
}

TEST(test_conf_narenas_1_works)
{
    probe_out_t p = run_ok(CONF_PROBE, "narenas:1", NULL);
    CHECK_EQ(p.narenas, 1);
    /* The dedicated oversize arena may exist beside it, nothing more. */
    CHECK(p.arenas >= 1 && p.arenas <= 2, "arenas.narenas %u with narenas:1", p.arenas);
}

TEST(test_conf_tcache_false_works)
{
    probe_out_t p = run_ok(CONF_PROBE, "tcache:false", NULL);
    CHECK_EQ(p.tcache, 0);
}

TEST(test_conf_zero_true_zeroes_every_block)
{
    check_child_t *r = run(CONF_PROBE, "zero", "zero:true", NULL);
    CHECK_CHILD_EXITED_0(r);
    CHECK(strstr(r->out, "zero ok"), "blocks not zeroed with zero:true; stdout:\n%s", r->out);
}

int main(int argc, char **argv) { return check_main(argc, argv); }
