/*
 * link_names.c - a program whose own globals bear the names of strata's internals (opt,
 * arenas, narenas, stats_print, ...) links with strata (libstrata.a by the static recipe,
 * or libstrata.so) and keeps them its own, and defines jemalloc's malloc_conf and
 * malloc_message, which configure strata and receive its messages.
 */
#define _GNU_SOURCE
#include "strata_names.h"

/* Names of strata's internal objects and functions, with other types and values. */
int opt = 12345;
const char *arenas[3] = {"mine", "not", "strata's"};
unsigned narenas = 77;
double os_page = 0.5;
int tcache_nbins = -1;
int stats_print(int x) { return x + 42; }
int conf_init(void) { return 7; }
int msg_write(const char *s) { return (int)strlen(s); }
int extent_alloc(int x) { return x * 2; }
int arena_choose(void) { return 3; }

/* jemalloc's variables, defined by the program: strata's weak definitions give way. */
const char *malloc_conf = "narenas:3,dirty_decay_ms:4321";
static char captured[8192];
static size_t ncaptured;
static void capture(void *cbopaque, const char *s)
{
    (void)cbopaque;
    size_t n = strlen(s);
    if (ncaptured + n < sizeof captured) {
        memcpy(captured + ncaptured, s, n);
        ncaptured += n;
    }
}
void (*malloc_message)(void *cbopaque, const char *s) = capture;

static void to_file(void *f, const char *s) { fputs(s, (FILE *)f); }

TEST(test_program_globals_named_like_strata_internals_stay_the_programs)
{
    void *p = malloc(100);
    CHECK(p != NULL);
    const char *version = CTL_READ("version", const char *);
    CHECK(version && strcmp(version, STRATA_VERSION) == 0, "malloc is not strata's");
    free(p);
    CHECK_EQ(opt, 12345);
    CHECK(strcmp(arenas[0], "mine") == 0 && strcmp(arenas[2], "strata's") == 0);
    CHECK_EQ(narenas, 77);
    CHECK(os_page == 0.5);
    CHECK(tcache_nbins == -1);
    CHECK_EQ(stats_print(1), 43);
    CHECK_EQ(conf_init(), 7);
    CHECK_EQ(msg_write("abc"), 3);
    CHECK_EQ(extent_alloc(4), 8);
    CHECK_EQ(arena_choose(), 3);
    /* strata's own statistics printer still prints strata's statistics. */
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    CHECK(m != NULL);
    malloc_stats_print(to_file, m, "J");
    fclose(m);
    CHECK(buf && strstr(buf, "\"jemalloc\"") != NULL, "malloc_stats_print wrote: %.200s", buf);
    free(buf);
}

TEST(test_program_malloc_conf_configures_strata)
{
    free(malloc(1));
    CHECK_EQ(CTL_READ("opt.narenas", unsigned), 3);
    CHECK_EQ(CTL_READ("opt.dirty_decay_ms", ssize_t), 4321);
}

/* The child: MALLOC_CONF names an unknown option; strata's report of it reaches the
 * program's malloc_message, not stderr. */
static int child_message(void)
{
    free(malloc(1));
    printf("captured:%s", captured);
    return 0;
}

TEST(test_program_malloc_message_receives_strata_messages)
{
    check_child_t *r = malloc(sizeof *r);
    CHECK(r != NULL);
    char *argv[] = {(char *)"/proc/self/exe", (char *)"--child-message", NULL};
    const char *env[] = {"MALLOC_CONF=no_such_option_here:1", "STRATA_CONF", NULL};
    CHECK(check_exec(argv, env, 30, r) == 0);
    CHECK_CHILD_EXITED_0(r);
    CHECK(strstr(r->out, "captured:<strata>: ") && strstr(r->out, "no_such_option_here"),
          "malloc_message did not receive the report; stdout:\n%s", r->out);
    CHECK(r->err_len == 0, "strata wrote to stderr although malloc_message is set:\n%s", r->err);
    free(r);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--child-message") == 0)
        return child_message();
    return check_main(argc, argv);
}
