/*
 * cxx_new_delete.cc - every C++ operator new/delete form is served by strata: plain, array,
 * nothrow, sized delete, C++17 aligned new (over-aligned types and explicit align_val_t up
 * to 2 MiB), aligned nothrow, sized+aligned delete; failure throws std::bad_alloc (nothrow:
 * nullptr) after calling the new_handler. Also linked statically (STRATA_TEST_STATIC).
 */
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "strata_names.h"

namespace {

constexpr size_t MiB = size_t(1) << 20;

// The usable size of p is strata's size class for (n, alignment), and the thread's
// allocation counter moved: p came from strata.
void check_strata_block(void *p, size_t n, size_t align, const char *what)
{
    CHECK(p != nullptr, "%s returned nullptr", what);
    if (align)
        CHECK_ALIGNED(p, align);
    size_t want = nallocx(n, align ? MALLOCX_ALIGN(align) : 0);
    size_t got = malloc_usable_size(p);
    CHECK(got == want, "%s(%zu, align %zu): usable %zu, strata's class is %zu", what, n, align,
          got, want);
    std::memset(p, 0x5a, got);
}

// Keeps the compiler from eliding a new/delete pair (allowed since C++14).
void *volatile sink;

struct alignas(64) Line {
    char b[64];
};
struct alignas(4096) Page {
    char b[100];
};
struct alignas(256) Odd {
    char b[300];
};

} // namespace

TEST(test_operator_symbols_resolve_to_libstrata)
{
#ifdef STRATA_TEST_STATIC
    // Linked statically: no dynamic symbols; the other tests check the blocks are strata's.
    uint64_t a0 = thread_allocated();
    void *p = ::operator new(MiB);
    sink = p;
    CHECK(thread_allocated() - a0 >= MiB, "operator new bypassed strata");
    ::operator delete(p);
#else
    static const char *names[] = {
        "_Znwm", "_Znam", "_ZdlPv", "_ZdaPv", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t",
        "_ZdlPvRKSt9nothrow_t", "_ZdaPvRKSt9nothrow_t", "_ZdlPvm", "_ZdaPvm",
        "_ZnwmSt11align_val_t", "_ZnamSt11align_val_t", "_ZnwmSt11align_val_tRKSt9nothrow_t",
        "_ZnamSt11align_val_tRKSt9nothrow_t", "_ZdlPvSt11align_val_t", "_ZdaPvSt11align_val_t",
        "_ZdlPvSt11align_val_tRKSt9nothrow_t", "_ZdaPvSt11align_val_tRKSt9nothrow_t",
        "_ZdlPvmSt11align_val_t", "_ZdaPvmSt11align_val_t"};
    for (const char *name : names) {
        void *sym = dlsym(RTLD_DEFAULT, name);
        CHECK(sym != nullptr, "%s not found", name);
        Dl_info info;
        CHECK(dladdr(sym, &info) && info.dli_fname && std::strstr(info.dli_fname, "libstrata"),
              "%s resolves to %s, not libstrata", name, info.dli_fname ? info.dli_fname : "?");
    }
#endif
}

TEST(test_plain_and_array_new_delete)
{
    uint64_t a0 = thread_allocated();
    for (size_t n = 1; n <= 9 * MiB; n = n * 3 + 1) {
        void *p = ::operator new(n);
        check_strata_block(p, n, 0, "operator new");
        ::operator delete(p);
        p = ::operator new[](n);
        check_strata_block(p, n, 0, "operator new[]");
        ::operator delete[](p);
    }
    CHECK(thread_allocated() - a0 >= 9 * MiB, "operator new bypassed strata");
    int *i = new int(42);
    sink = i;
    CHECK(*i == 42);
    delete i;
    std::string *s = new std::string[10];
    s[9] = std::string(1000, 'x');
    delete[] s;
}

TEST(test_nothrow_new_delete)
{
    for (size_t n = 1; n <= 3 * MiB; n = n * 5 + 3) {
        void *p = ::operator new(n, std::nothrow);
        check_strata_block(p, n, 0, "operator new(nothrow)");
        ::operator delete(p, std::nothrow);
        p = ::operator new[](n, std::nothrow);
        check_strata_block(p, n, 0, "operator new[](nothrow)");
        ::operator delete[](p, std::nothrow);
    }
    char *c = new (std::nothrow) char[100];
    CHECK(c != nullptr);
    delete[] c;
}

TEST(test_sized_delete)
{
    for (size_t n = 1; n <= 9 * MiB; n = n * 2 + 5) {
        uint64_t d0 = thread_deallocated();
        void *p = ::operator new(n);
        ::operator delete(p, n);
        p = ::operator new[](n);
        ::operator delete[](p, n);
        CHECK(thread_deallocated() - d0 >= 2 * n, "sized delete of %zu bytes did not free", n);
    }
    struct S {
        long v[3];
    };
    S *s = new S(); // the compiler emits sized delete (-fsized-deallocation)
    sink = s;
    delete s;
}

TEST(test_overaligned_types_use_aligned_new)
{
    std::vector<Line *> lines;
    for (int i = 0; i < 1000; i++) {
        lines.push_back(new Line());
        CHECK_ALIGNED(lines.back(), 64);
    }
    for (Line *l : lines)
        delete l;
    for (int i = 0; i < 20; i++) {
        Page *p = new Page();
        CHECK_ALIGNED(p, 4096);
        CHECK(malloc_usable_size(p) >= sizeof(Page));
        delete p;
        Page *arr = new Page[3];
        CHECK_ALIGNED(arr, 4096);
        delete[] arr;
        Odd *o = new Odd[7];
        CHECK_ALIGNED(o, 256);
        delete[] o;
    }
    std::vector<Line> v(10000); // std::allocator uses aligned new for alignas(64)
    CHECK_ALIGNED(v.data(), 64);
}

TEST(test_explicit_align_val_t_new_delete)
{
    static const size_t aligns[] = {32, 64, 4096, 65536, 2 * MiB};
    static const size_t sizes[] = {1, 100, 4096, 5000, 3 * MiB};
    for (size_t a : aligns) {
        std::align_val_t al{a};
        for (size_t n : sizes) {
            void *p = ::operator new(n, al);
            check_strata_block(p, n, a, "operator new(align)");
            ::operator delete(p, al);
            p = ::operator new[](n, al);
            check_strata_block(p, n, a, "operator new[](align)");
            ::operator delete[](p, al);
            p = ::operator new(n, al, std::nothrow);
            check_strata_block(p, n, a, "operator new(align, nothrow)");
            ::operator delete(p, al, std::nothrow);
            p = ::operator new[](n, al, std::nothrow);
            check_strata_block(p, n, a, "operator new[](align, nothrow)");
            ::operator delete[](p, al, std::nothrow);
            uint64_t d0 = thread_deallocated();
            p = ::operator new(n, al);
            ::operator delete(p, n, al);
            p = ::operator new[](n, al);
            ::operator delete[](p, n, al);
            CHECK(thread_deallocated() - d0 >= 2 * n, "sized+aligned delete did not free");
        }
    }
}

TEST(test_impossible_new_throws_bad_alloc)
{
    static const size_t huge[] = {SIZE_MAX, SIZE_MAX - 4096, size_t(1) << 62};
    for (size_t n : huge) {
        bool thrown = false;
        try {
            void *p = ::operator new(check_opaque(n));
            sink = p;
            ::operator delete(p);
        } catch (const std::bad_alloc &) {
            thrown = true;
        }
        CHECK(thrown, "operator new(%zu) did not throw std::bad_alloc", n);
        thrown = false;
        try {
            void *p = ::operator new[](check_opaque(n), std::align_val_t(64));
            ::operator delete[](p, std::align_val_t(64));
        } catch (const std::bad_alloc &) {
            thrown = true;
        }
        CHECK(thrown, "operator new[](%zu, align 64) did not throw std::bad_alloc", n);
        thrown = false;
        try {
            char *c = new char[check_opaque(n)];
            sink = c;
            delete[] c;
        } catch (const std::bad_alloc &) { // std::bad_array_new_length is a bad_alloc
            thrown = true;
        }
        CHECK(thrown, "new char[%zu] did not throw", n);
    }
    // The program is healthy after the throws.
    std::vector<std::string> v(1000, std::string(100, 'y'));
    CHECK(v[999][99] == 'y');
}

TEST(test_impossible_nothrow_new_returns_nullptr)
{
    CHECK(::operator new(check_opaque(SIZE_MAX), std::nothrow) == nullptr);
    CHECK(::operator new[](check_opaque(SIZE_MAX - 100), std::nothrow) == nullptr);
    CHECK(::operator new(check_opaque(SIZE_MAX), std::align_val_t(4096), std::nothrow) == nullptr);
    CHECK(::operator new[](check_opaque(size_t(1) << 62), std::align_val_t(64), std::nothrow) ==
          nullptr);
}

namespace {
std::atomic<int> handler_calls;
void counting_handler()
{
    handler_calls++;
    std::set_new_handler(nullptr); // the next failure throws (or returns nullptr)
}
} // namespace

TEST(test_new_handler_is_called_before_failing)
{
    struct Case {
        const char *what;
        bool nothrow;
        size_t align;
    } cases[] = {{"new", false, 0}, {"new(nothrow)", true, 0}, {"new(align)", false, 64},
                 {"new(align, nothrow)", true, 4096}};
    for (const Case &c : cases) {
        handler_calls = 0;
        std::set_new_handler(counting_handler);
        bool thrown = false;
        void *p = nullptr;
        try {
            if (c.nothrow)
                p = c.align ? ::operator new(check_opaque(SIZE_MAX), std::align_val_t(c.align),
                                             std::nothrow)
                            : ::operator new(check_opaque(SIZE_MAX), std::nothrow);
            else
                p = c.align ? ::operator new(check_opaque(SIZE_MAX), std::align_val_t(c.align))
                            : ::operator new(check_opaque(SIZE_MAX));
        } catch (const std::bad_alloc &) {
            thrown = true;
        }
        CHECK(handler_calls == 1, "%s: new_handler called %d times, want 1", c.what,
              handler_calls.load());
        CHECK(p == nullptr && thrown == !c.nothrow, "%s: returned %p, thrown %d", c.what, p,
              thrown);
    }
}

TEST(test_new_delete_across_threads)
{
    // Objects created in one thread and deleted in another, through the library.
    std::vector<std::shared_ptr<std::string>> made(4000);
    std::thread producer([&] {
        for (size_t i = 0; i < made.size(); i++)
            made[i] = std::make_shared<std::string>(i % 700 + 1, char('a' + i % 26));
    });
    producer.join();
    std::thread consumer([&] {
        for (size_t i = 0; i < made.size(); i++) {
            CHECK(made[i]->size() == i % 700 + 1 && (*made[i])[0] == char('a' + i % 26));
            made[i].reset();
        }
    });
    consumer.join();
}

int main(int argc, char **argv) { return check_main(argc, argv); }
