// kmem bench preload's `cpp_front_ends`: the allocation calls a C++ program makes
// besides plain malloc, in turn on 64 live slots: new/delete of a three-word node,
// new[]/delete[] of 40-71 byte arrays, new/delete of a 64-byte-aligned struct,
// calloc/free of 16-79 bytes, posix_memalign(32)/free of 48 bytes. Each object
// is written at its start and read back when freed; the checksum keeps the
// compiler from removing any of it and is the same on every malloc.
//
//   front [iterations]   (default 5,000,000)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

struct Node {
    Node *left, *right;
    unsigned long value;
};

struct alignas(64) Line {
    unsigned char bytes[64];
};

enum Kind { NONE, NODE, ARRAY, LINE, CALLOC, MEMALIGN };

// Frees `p` as its kind was allocated; returns the byte written at its start.
static unsigned long release(void *p, Kind k) {
    unsigned long first = p ? *static_cast<unsigned char *>(p) : 0;
    switch (k) {
    case NODE: delete static_cast<Node *>(p); break;
    case ARRAY: delete[] static_cast<char *>(p); break;
    case LINE: delete static_cast<Line *>(p); break;
    case CALLOC:
    case MEMALIGN: std::free(p); break;
    case NONE: break;
    }
    return first;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? std::atol(argv[1]) : 5000000;
    void *slot[64] = {};
    Kind kind[64] = {};
    unsigned long sum = 0;
    for (long i = 0; i < n; i++) {
        unsigned k = (unsigned)(i * 7) & 63;
        sum += release(slot[k], kind[k]);
        void *p = nullptr;
        Kind t = (Kind)(1 + i % 5);
        switch (t) {
        case NODE: {
            Node *node = new Node{nullptr, nullptr, (unsigned long)i};
            node->left = reinterpret_cast<Node *>((unsigned long)i & 0xff);
            p = node;
            break;
        }
        case ARRAY: {
            char *a = new char[40 + (i & 31)];
            a[0] = (char)i;
            p = a;
            break;
        }
        case LINE: {
            Line *l = new Line;
            l->bytes[0] = (unsigned char)i;
            p = l;
            break;
        }
        case CALLOC: {
            unsigned char *c = static_cast<unsigned char *>(std::calloc(1, 16 + (i & 63)));
            if (!c) return 1;
            sum += c[15];
            c[0] = 1;
            p = c;
            break;
        }
        case MEMALIGN:
            if (posix_memalign(&p, 32, 48) != 0) return 1;
            std::memset(p, 1, 48);
            break;
        case NONE: break;
        }
        slot[k] = p;
        kind[k] = t;
    }
    for (unsigned k = 0; k < 64; k++) sum += release(slot[k], kind[k]);
    std::printf("%ld %lu\n", n, sum);
    return 0;
}
