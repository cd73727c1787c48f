/* Optional C loop of the mmap store's key index (mqcore.plugins.store_mmap.indexfile).
 *
 * put_entries() writes the index entries of a batch of records into one index file's map:
 * for every key, Java's String.hashCode of "topic#key" (over UTF-16 code units), the slot,
 * the 20-byte entry linked to the slot's previous head, then the slot. It is the C version
 * of indexfile.py_put_entries, which is the reference (same arguments, same result, same
 * bytes written); MQCORE_NO_SPEEDUPS=1 selects the Python code.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "keyhash.h"

#define HEADER_SIZE 40
#define SLOT_SIZE 4
#define ENTRY_SIZE 20
#define INT_MAX32 0x7FFFFFFFLL

static inline void
put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void
put_be64(unsigned char *p, uint64_t v)
{
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

static inline int32_t
get_be32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     (uint32_t)p[3]);
}

static PyObject *
key_hash(PyObject *self, PyObject *args)
{
    PyObject *topic, *key;
    if (!PyArg_ParseTuple(args, "UU:key_hash", &topic, &key))
        return NULL;
    uint32_t h = keyhash_fold(0, topic);
    h = 31u * h + '#';
    return PyLong_FromLong(keyhash_finish(keyhash_fold(h, key)));
}

PyDoc_STRVAR(key_hash_doc,
             "key_hash(topic, key) -> int\n\n"
             "RocketMQ's indexKeyHashMethod over ``topic#key``: abs(String.hashCode), 0 for "
             "Integer.MIN_VALUE.");

static PyObject *
put_entries(PyObject *self, PyObject *args)
{
    PyObject *buf, *records;
    Py_ssize_t pos, key_pos;
    long long last_phy, slots, entries_at, limit, count, begin_phy, begin_ts, end_phy, end_ts;
    if (!PyArg_ParseTuple(args, "OO!nnLLLLLLLLL:put_entries", &buf, &PyList_Type, &records,
                          &pos, &key_pos, &last_phy, &slots, &entries_at, &limit, &count,
                          &begin_phy, &begin_ts, &end_phy, &end_ts))
        return NULL;
    if (slots < 1 || limit < 2 || count < 1 || entries_at < HEADER_SIZE + slots * SLOT_SIZE ||
        pos < 0) {
        PyErr_SetString(PyExc_ValueError, "put_entries: bad index geometry");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE) < 0)
        return NULL;
    if ((long long)view.len < entries_at + limit * ENTRY_SIZE) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "put_entries: the map is smaller than the file");
        return NULL;
    }
    unsigned char *mm = (unsigned char *)view.buf;
    long long new_slots = 0;
    Py_ssize_t n = PyList_GET_SIZE(records);
    int full = 0;
    for (; pos < n && !full; pos++) {
        PyObject *rec = PyList_GET_ITEM(records, pos);
        if (!PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) != 4) {
            PyErr_SetString(PyExc_TypeError,
                            "put_entries: records are (topic, keys, phy offset, store time)");
            goto error;
        }
        PyObject *topic = PyTuple_GET_ITEM(rec, 0);
        long long phy = PyLong_AsLongLong(PyTuple_GET_ITEM(rec, 2));
        if (phy == -1 && PyErr_Occurred())
            goto error;
        long long ts = PyLong_AsLongLong(PyTuple_GET_ITEM(rec, 3));
        if (ts == -1 && PyErr_Occurred())
            goto error;
        if (key_pos < 0) { /* a record not started yet (else: resumed in a new file) */
            if (phy <= last_phy)
                continue; /* already indexed */
            last_phy = phy;
            key_pos = 0;
        }
        if (!PyUnicode_Check(topic)) {
            PyErr_SetString(PyExc_TypeError, "put_entries: a topic must be a str");
            goto error;
        }
        PyObject *keys = PySequence_Fast(PyTuple_GET_ITEM(rec, 1), "put_entries: keys");
        if (keys == NULL)
            goto error;
        Py_ssize_t nkeys = PySequence_Fast_GET_SIZE(keys);
        PyObject **items = PySequence_Fast_ITEMS(keys);
        uint32_t head = 0;
        int hashed = 0;
        for (; key_pos < nkeys; key_pos++) {
            PyObject *key = items[key_pos];
            if (!PyUnicode_Check(key)) {
                Py_DECREF(keys);
                PyErr_SetString(PyExc_TypeError, "put_entries: a key must be a str");
                goto error;
            }
            if (PyUnicode_GET_LENGTH(key) == 0)
                continue;
            if (count >= limit) { /* full: the caller starts a file and resumes here */
                full = 1;
                break;
            }
            if (count == 1) {
                begin_phy = phy;
                begin_ts = ts;
            }
            if (!hashed) {
                head = 31u * keyhash_fold(0, topic) + '#';
                hashed = 1;
            }
            int32_t h = keyhash_finish(keyhash_fold(head, key));
            unsigned char *slot = mm + HEADER_SIZE + ((long long)h % slots) * SLOT_SIZE;
            long long prev = get_be32(slot);
            if (prev <= 0 || prev >= count) {
                prev = 0;
                new_slots++;
            }
            long long diff = 0;
            /* Times from a damaged file may be anywhere in a long: subtract only when
             * ts >= begin_ts > 0, where the difference cannot overflow (else it is 0). */
            if (begin_ts > 0 && ts > begin_ts) {
                diff = (ts - begin_ts) / 1000;
                if (diff > INT_MAX32)
                    diff = INT_MAX32;
            }
            /* The entry (with its link) is complete before the slot points at it. */
            unsigned char *entry = mm + entries_at + count * ENTRY_SIZE;
            put_be32(entry, (uint32_t)h);
            put_be64(entry + 4, (uint64_t)phy);
            put_be32(entry + 12, (uint32_t)diff);
            put_be32(entry + 16, (uint32_t)prev);
            put_be32(slot, (uint32_t)count);
            count++;
            end_phy = phy;
            end_ts = ts;
        }
        Py_DECREF(keys);
        if (full)
            break;
        key_pos = -1;
    }
    PyBuffer_Release(&view);
    if (!full)
        key_pos = -1;
    return Py_BuildValue("nnLLLLLLL", pos, key_pos, count, last_phy, new_slots, begin_phy,
                         begin_ts, end_phy, end_ts);
error:
    PyBuffer_Release(&view);
    return NULL;
}

PyDoc_STRVAR(put_entries_doc,
             "put_entries(map, records, pos, key_pos, last_phy, slots, entries_at, limit, "
             "count, begin_phy, begin_ts, end_phy, end_ts) -> (pos, key_pos, count, "
             "last_phy, new_slots, begin_phy, begin_ts, end_phy, end_ts)\n\n"
             "The C version of mqcore.plugins.store_mmap.indexfile.py_put_entries.");

static PyMethodDef methods[] = {
    {"put_entries", put_entries, METH_VARARGS, put_entries_doc},
    {"key_hash", key_hash, METH_VARARGS, key_hash_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "mqcore.plugins.store_mmap._keyindex",
    "C loop of the mmap store's key index (optional; see indexfile.py_put_entries).",
    -1,
    methods,
};

PyMODINIT_FUNC
PyInit__keyindex(void)
{
    return PyModule_Create(&module);
}
