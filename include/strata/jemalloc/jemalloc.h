/*
 * jemalloc/jemalloc.h - lets a program written for jemalloc build unchanged against
 * strata: the same names (mallocx, mallctl, MALLOCX_*, ...) from strata.h.
 */
#ifndef STRATA_JEMALLOC_SHIM_H
#define STRATA_JEMALLOC_SHIM_H
/* What jemalloc's own header brings in. */
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <strings.h>

#include <strata.h>
#define JEMALLOC_VERSION "5.3.0-0-strata-" STRATA_VERSION
#define JEMALLOC_VERSION_MAJOR 5
#define JEMALLOC_VERSION_MINOR 3
#define MALLCTL_ARENAS_ALL 4096
#endif
