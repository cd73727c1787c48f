/* The key index's hash of a key (indexfile.py's key_hash): Java's String.hashCode of
 * "topic#key", made non-negative as RocketMQ's IndexService does. Shared by the index's own
 * loop (_keyindex.c) and the one-call put (_put.c), which must hash every key alike. */
#ifndef MQCORE_STORE_MMAP_KEYHASH_H
#define MQCORE_STORE_MMAP_KEYHASH_H

#include <Python.h>
#include <stdint.h>

/* Java's String.hashCode folded over ``text`` (UTF-16 code units), from ``h``. */
static inline uint32_t
keyhash_fold(uint32_t h, PyObject *text)
{
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *p = (const Py_UCS1 *)data;
        for (Py_ssize_t i = 0; i < n; i++)
            h = 31u * h + p[i];
        return h;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 cp = PyUnicode_READ(kind, data, i);
        if (cp > 0xFFFF) { /* a surrogate pair in UTF-16, as Java's String holds it */
            cp -= 0x10000;
            h = 31u * h + (uint32_t)(0xD800 + (cp >> 10));
            h = 31u * h + (uint32_t)(0xDC00 + (cp & 0x3FF));
        }
        else {
            h = 31u * h + (uint32_t)cp;
        }
    }
    return h;
}

/* The folded hash made non-negative (Math.abs, with Integer.MIN_VALUE taken as 0). */
static inline int32_t
keyhash_finish(uint32_t h)
{
    int32_t s = (int32_t)h;
    if (s == INT32_MIN)
        return 0;
    return s < 0 ? -s : s;
}

#endif
