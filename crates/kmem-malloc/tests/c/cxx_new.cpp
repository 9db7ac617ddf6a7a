// C++'s global operator new and delete under libkmem.so (tests/shim.rs,
// cxx_operators_*): which library defines them, every form round trip, alignment,
// and the failure semantics (std::bad_alloc, nothrow, the new-handler).
//
//   cxx_new where     prints the file that defines each operator, as the program
//                     resolves it
//   cxx_new forms     allocates, fills, checks and deletes through every form
//   cxx_new fail      huge requests: bad_alloc, nullptr, the new-handler's calls
//   cxx_new double    deletes one object twice (must be reported, then abort)
//   cxx_new leak      leaks 100 nodes from leak_nodes() (for KMEM_LEAKS=1)
#include <dlfcn.h>
#include <malloc.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#define CHECK(c)                                                   \
    do {                                                           \
        if (!(c)) {                                                \
            std::fprintf(stderr, "line %d: %s\n", __LINE__, #c);  \
            std::exit(1);                                          \
        }                                                          \
    } while (0)

static const char *defined_in(const void *f) {
    Dl_info info;
    if (!dladdr(f, &info) || !info.dli_fname) return "?";
    const char *slash = std::strrchr(info.dli_fname, '/');
    return slash ? slash + 1 : info.dli_fname;
}

static int where() {
    using New = void *(*)(std::size_t);
    using NewAl = void *(*)(std::size_t, std::align_val_t);
    using NewNt = void *(*)(std::size_t, const std::nothrow_t &) noexcept;
    using Del = void (*)(void *) noexcept;
    using DelSized = void (*)(void *, std::size_t) noexcept;
    using DelAl = void (*)(void *, std::align_val_t) noexcept;
    std::printf("new %s\n", defined_in((const void *)static_cast<New>(&::operator new)));
    std::printf("new[] %s\n", defined_in((const void *)static_cast<New>(&::operator new[])));
    std::printf("new-aligned %s\n", defined_in((const void *)static_cast<NewAl>(&::operator new)));
    std::printf("new-nothrow %s\n", defined_in((const void *)static_cast<NewNt>(&::operator new)));
    std::printf("delete %s\n", defined_in((const void *)static_cast<Del>(&::operator delete)));
    std::printf("delete[] %s\n", defined_in((const void *)static_cast<Del>(&::operator delete[])));
    std::printf("delete-sized %s\n", defined_in((const void *)static_cast<DelSized>(&::operator delete)));
    std::printf("delete-aligned %s\n", defined_in((const void *)static_cast<DelAl>(&::operator delete)));
    return 0;
}

struct alignas(64) Line {
    unsigned char b[64];
};
struct alignas(4096) Page {
    unsigned char b[5000];
};

static void fill(void *p, std::size_t n, unsigned seed) {
    std::memset(p, (int)(seed & 0xff), n);
}
static void check(const void *p, std::size_t n, unsigned seed) {
    const unsigned char *c = (const unsigned char *)p;
    for (std::size_t i = 0; i < n; i++) CHECK(c[i] == (seed & 0xff));
}

static int forms() {
    // Plain and array new of many sizes, kept alive together, then deleted
    // (sized and unsized), so that objects of one class are handed out and freed
    // in batches.
    std::vector<std::pair<char *, std::size_t>> live;
    unsigned seed = 1;
    for (int round = 0; round < 3; round++) {
        for (std::size_t n = 0; n <= 70000; n = n < 64 ? n + 1 : n * 5 / 4) {
            char *p = (round & 1) ? new char[n] : static_cast<char *>(::operator new(n));
            CHECK(p != nullptr);
            // new and new[]: malloc's alignment, 16 above 8 bytes (clang assumes
            // __STDCPP_DEFAULT_NEW_ALIGNMENT__ of operator new's result), else 8.
            std::size_t align = n > 8 ? 16 : 8;
            CHECK(((std::uintptr_t)p & (align - 1)) == 0);
            CHECK(malloc_usable_size(p) >= n);
            fill(p, n, seed + (unsigned)n);
            live.push_back({p, n});
        }
        for (std::size_t i = 0; i < live.size(); i++) {
            auto [p, n] = live[i];
            check(p, n, seed + (unsigned)n);
            if (round & 1)
                delete[] p;
            else if (i & 1)
                ::operator delete(p, n);  // sized
            else
                ::operator delete(p);
        }
        live.clear();
        seed++;
    }
    // new of zero bytes: a unique pointer each time.
    void *z1 = ::operator new(0), *z2 = ::operator new(0);
    CHECK(z1 && z2 && z1 != z2);
    ::operator delete(z1);
    ::operator delete(z2);
    // Objects with new-extended alignment (the align_val_t forms).
    std::vector<Line *> lines;
    std::vector<Page *> pages;
    for (int i = 0; i < 200; i++) {
        Line *l = new Line;
        CHECK(((std::uintptr_t)l & 63) == 0);
        fill(l, sizeof *l, (unsigned)i);
        lines.push_back(l);
        if (i % 20 == 0) {
            Page *pg = new Page[2];
            CHECK(((std::uintptr_t)pg & 4095) == 0);
            fill(pg, sizeof(Page) * 2, (unsigned)i);
            pages.push_back(pg);
        }
    }
    for (int i = 0; i < 200; i++) {
        check(lines[i], sizeof(Line), (unsigned)i);
        delete lines[i];
    }
    for (std::size_t i = 0; i < pages.size(); i++) {
        check(pages[i], sizeof(Page) * 2, (unsigned)(i * 20));
        delete[] pages[i];
    }
    // The nothrow forms, plain and aligned, and their deletes.
    for (std::size_t n : {1, 24, 100, 3000, 100000}) {
        char *p = new (std::nothrow) char[n];
        CHECK(p != nullptr);
        fill(p, n, 7);
        check(p, n, 7);
        ::operator delete[](p, std::nothrow);
        void *q = ::operator new(n, std::align_val_t(256), std::nothrow);
        CHECK(q != nullptr && ((std::uintptr_t)q & 255) == 0);
        fill(q, n, 9);
        check(q, n, 9);
        ::operator delete(q, std::align_val_t(256), std::nothrow);
        void *r = ::operator new[](n, std::align_val_t(128));
        CHECK(((std::uintptr_t)r & 127) == 0);
        ::operator delete[](r, n, std::align_val_t(128));
    }
    // align_val_t at or below the default alignment: still honoured, whatever the
    // size's class would give (kmalloc-24, -40 and -56 are 8-aligned).
    for (std::size_t n = 1; n <= 200; n++) {
        for (std::size_t al : {1, 2, 4, 8, 16}) {
            void *p = ::operator new(n, std::align_val_t(al));
            CHECK(((std::uintptr_t)p & (al - 1)) == 0);
            fill(p, n, 3);
            ::operator delete(p, std::align_val_t(al));
        }
    }
    // new'd memory is malloc's: free and realloc take it.
    char *s = new char[40];
    std::strcpy(s, "grows");
    s = static_cast<char *>(std::realloc(s, 5000));
    CHECK(s && std::strcmp(s, "grows") == 0);
    std::free(s);
    std::printf("forms ok\n");
    return 0;
}

static int handler_calls;
static void handler() {
    // Gives up after the first call: the next failure throws.
    handler_calls++;
    std::set_new_handler(nullptr);
}

static int fail() {
    const std::size_t huge = (std::size_t)1 << 62;
    int threw = 0;
    try {
        char *volatile p = new char[huge];
        (void)p;
    } catch (const std::bad_alloc &) {
        threw++;
    }
    try {
        void *volatile p = ::operator new(huge);
        (void)p;
    } catch (const std::bad_alloc &) {
        threw++;
    }
    try {
        void *volatile p = ::operator new(huge, std::align_val_t(64));
        (void)p;
    } catch (const std::bad_alloc &) {
        threw++;
    }
    std::printf("bad_alloc %d\n", threw);
    char *n1 = new (std::nothrow) char[huge];
    void *n2 = ::operator new(huge, std::align_val_t(64), std::nothrow);
    std::printf("nothrow %s\n", n1 == nullptr && n2 == nullptr ? "null" : "non-null");
    std::set_new_handler(handler);
    try {
        char *volatile p = new char[huge];
        (void)p;
    } catch (const std::bad_alloc &) {
        std::printf("handler %d then bad_alloc\n", handler_calls);
    }
    // The allocator still works after the failures.
    int *ok = new int[1000];
    ok[999] = 1;
    delete[] ok;
    return 0;
}

struct Node3 {
    Node3 *left, *right;
    long value;
};
static Node3 *volatile leaked[100];

// Allocates 100 nodes and drops them: a leak whose site is this function.
__attribute__((noinline)) static void leak_nodes() {
    for (int i = 0; i < 100; i++) leaked[i] = new Node3{nullptr, nullptr, i};
}

// Overwrites the stack below the caller's frame: the dead frames of `new`'s slow
// paths may still hold a node's address, which the conservative scan at exit would
// take for a reference (a leak hidden, as kmemleak's and valgrind's scans hide it).
__attribute__((noinline)) static void scrub_stack() {
    volatile char pad[16384];
    for (std::size_t i = 0; i < sizeof pad; i++) pad[i] = 0;
}

static int leak() {
    leak_nodes();
    for (int i = 0; i < 100; i++) leaked[i] = nullptr;
    scrub_stack();
    return 0;
}

static int double_delete() {
    int *volatile p = new int(5);
    delete p;
    delete p;
    return 0;
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "forms";
    if (!std::strcmp(what, "where")) return where();
    if (!std::strcmp(what, "forms")) return forms();
    if (!std::strcmp(what, "fail")) return fail();
    if (!std::strcmp(what, "double")) return double_delete();
    if (!std::strcmp(what, "leak")) return leak();
    return 2;
}
