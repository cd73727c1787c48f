/* Optional C write of an mmap store put (mqcore.plugins.store_mmap.fastput).
 *
 * append() does, in one call under the store's write lock, what CommitLog.put_batch,
 * Dispatcher.put_batch and ConsumeQueue.append_unit(s) do for the common case of a put:
 * the records of a prepared batch stamped straight into the free space of the commit log's
 * current mapped segment (no intermediate bytes object), then their consume-queue units
 * written into the queue's current file, each unit's tags code and offset before its size,
 * so that another process reads it as free space until it is whole. The caller checked that
 * nothing rolls (segment, queue file) and advances the Python counters itself; the Python
 * path (codec.pack, append_units) is the reference and writes the same bytes.
 */

#include "speedups.h"
#include "keyhash.h"

/* Item ``i`` of the prepared items (borrowed), checked to be a tuple in Prepared's layout. */
static PyObject *
item_at(PyObject *prepared, Py_ssize_t i)
{
    PyObject *item = PyTuple_GET_ITEM(prepared, i);
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != P_FIELDS) {
        PyErr_Format(PyExc_TypeError,
                     "prepared item %zd is not a %d-field tuple from codec.prepare()", i,
                     P_FIELDS);
        return NULL;
    }
    PyObject *body = PyTuple_GET_ITEM(item, P_BODY);
    PyObject *trailer = PyTuple_GET_ITEM(item, P_TRAILER);
    if (!PyBytes_Check(body) || !PyBytes_Check(trailer)) {
        PyErr_Format(PyExc_TypeError, "prepared item %zd: body and trailer must be bytes", i);
        return NULL;
    }
    return item;
}

/* The key index file (indexfile.py): header, hash slots, entries. */
#define INDEX_HEADER_SIZE_ 40
#define SLOT_SIZE_ 4
#define ENTRY_SIZE_ 20

typedef struct {
    long long count, new_slots, begin_phy, begin_ts, end_phy, end_ts;
} IndexState;
static Py_ssize_t count_keys(PyObject *keys, Py_ssize_t n);
static void write_entries(unsigned char *mm, PyObject *topic, PyObject *keys, PyObject *offsets,
                          long long ts, long long slots, long long entries_at, IndexState *st);

PyDoc_STRVAR(append_doc,
"append(segment, position, prepared, queue_id, queue_offset, commitlog_offset,\n"
"       store_timestamp, store_ip, store_port, born_ip, born_port, queue_map,\n"
"       queue_position, index=None) -> (offsets, end, index_state)\n\n"
"Write the records of ``prepared`` into ``segment`` (a writable map) from ``position``\n"
"(the record at commit-log offset ``commitlog_offset``), as codec.pack lays them out, then\n"
"their 20-byte units into ``queue_map`` from byte ``queue_position``. Returns each record's\n"
"commit-log offset and the offset just past the last. ``index`` is None or (map, topic,\n"
"keys, slots, entries_at, limit, count, begin_phy, begin_ts, end_phy, end_ts): the key\n"
"index file's map and header values, and each record's keys (a list of str, or None);\n"
"their entries are written as indexfile.py_put_entries writes them and index_state is\n"
"(count, new_slots, begin_phy, begin_ts, end_phy, end_ts) after them (None without an\n"
"index). Raises ValueError, writing nothing, when anything does not fit.");

static PyObject *write_all(PyObject *prepared, PyObject *seg_obj, Py_ssize_t wpos,
                           int32_t queue_id, long long qoff, long long phys, long long store_ts,
                           const char *store_ip, int32_t store_port, const char *born_ip,
                           int32_t born_port, PyObject *cq_obj, Py_ssize_t cq_pos,
                           PyObject *index);

static PyObject *
put_append(PyObject *self, PyObject *args)
{
    PyObject *seg_obj, *given, *cq_obj, *index = Py_None;
    Py_ssize_t wpos, cq_pos;
    int32_t queue_id, store_port, born_port;
    long long qoff, phys, store_ts;
    const char *store_ip, *born_ip;
    Py_ssize_t store_ip_len, born_ip_len;
    if (!PyArg_ParseTuple(args, "OnO!iLLLy#iy#iOn|O:append", &seg_obj, &wpos, &PyList_Type,
                          &given, &queue_id, &qoff, &phys, &store_ts, &store_ip,
                          &store_ip_len, &store_port, &born_ip, &born_ip_len, &born_port,
                          &cq_obj, &cq_pos, &index))
        return NULL;
    if (store_ip_len != 4 || born_ip_len != 4) {
        PyErr_SetString(PyExc_ValueError, "append: host addresses must be 4 bytes (IPv4)");
        return NULL;
    }
    /* A tuple of the items: nothing run by an allocation below (a finalizer) can change
     * the list between the checks and the writes. */
    PyObject *prepared = PyList_AsTuple(given);
    if (prepared == NULL)
        return NULL;
    PyObject *result = write_all(prepared, seg_obj, wpos, queue_id, qoff, phys, store_ts,
                                 store_ip, store_port, born_ip, born_port, cq_obj, cq_pos, index);
    Py_DECREF(prepared);
    return result;
}

static PyObject *
write_all(PyObject *prepared, PyObject *seg_obj, Py_ssize_t wpos, int32_t queue_id,
          long long qoff, long long phys, long long store_ts, const char *store_ip,
          int32_t store_port, const char *born_ip, int32_t born_port, PyObject *cq_obj,
          Py_ssize_t cq_pos, PyObject *index)
{
    Py_ssize_t n = PyTuple_GET_SIZE(prepared);
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "append: nothing to write");
        return NULL;
    }
    /* Check everything before writing anything: sizes, the shared header fields. */
    long long total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = item_at(prepared, i);
        int32_t size;
        if (item == NULL || as_int32(PyTuple_GET_ITEM(item, P_SIZE), "record size", &size) < 0)
            return NULL;
        if ((Py_ssize_t)size != HEADER_SIZE + PyBytes_GET_SIZE(PyTuple_GET_ITEM(item, P_BODY)) +
                                    PyBytes_GET_SIZE(PyTuple_GET_ITEM(item, P_TRAILER))) {
            PyErr_Format(PyExc_ValueError,
                         "prepared item %zd: record size %d does not match its body and "
                         "trailer", i, (int)size);
            return NULL;
        }
        total += size;
    }
    PyObject *first = PyTuple_GET_ITEM(prepared, 0);
    int32_t sflag, recon;
    int64_t born, ptx;
    if (as_int32(PyTuple_GET_ITEM(first, P_SYS_FLAG), "sys flag", &sflag) < 0 ||
        as_int64(PyTuple_GET_ITEM(first, P_BORN_TIMESTAMP), "born timestamp", &born) < 0 ||
        as_int32(PyTuple_GET_ITEM(first, P_RECONSUME_TIMES), "reconsume times", &recon) < 0 ||
        as_int64(PyTuple_GET_ITEM(first, P_PREPARED_TRANSACTION_OFFSET), "prepared offset",
                 &ptx) < 0)
        return NULL;
    PyObject *imap = NULL, *topic = NULL, *keys = NULL;
    long long slots = 0, entries_at = 0, limit = 0;
    IndexState st = {0, 0, 0, 0, 0, 0};
    if (index != Py_None) {
        if (!PyTuple_Check(index) ||
            !PyArg_ParseTuple(index, "OUOLLLLLLLL:append index", &imap, &topic, &keys, &slots,
                              &entries_at, &limit, &st.count, &st.begin_phy, &st.begin_ts,
                              &st.end_phy, &st.end_ts)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "append: index is a tuple or None");
            return NULL;
        }
        Py_ssize_t pending = count_keys(keys, n);
        if (pending < 0)
            return NULL;
        if (slots < 1 || st.count < 1 || entries_at < INDEX_HEADER_SIZE_ + slots * SLOT_SIZE_ ||
            st.count + pending > limit) {
            PyErr_SetString(PyExc_ValueError, "append: the index entries do not fit their file");
            return NULL;
        }
    }
    PyObject *offsets = PyList_New(n);
    if (offsets == NULL)
        return NULL;
    Py_buffer seg, cq, ix = {0};
    if (PyObject_GetBuffer(seg_obj, &seg, PyBUF_WRITABLE) < 0) {
        Py_DECREF(offsets);
        return NULL;
    }
    if (PyObject_GetBuffer(cq_obj, &cq, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&seg);
        Py_DECREF(offsets);
        return NULL;
    }
    if (imap != NULL && PyObject_GetBuffer(imap, &ix, PyBUF_WRITABLE) < 0) {
        ix.obj = NULL;
        goto fail;
    }
    if (wpos < 0 || cq_pos < 0 || (long long)wpos + total > (long long)seg.len ||
        cq_pos + n * UNIT_SIZE > cq.len ||
        (imap != NULL && (long long)ix.len < entries_at + limit * ENTRY_SIZE_)) {
        PyErr_SetString(PyExc_ValueError, "append: the records or units do not fit their file");
        goto fail;
    }
    /* Offsets and codes first (allocation, conversions): nothing is written if they fail. */
    for (Py_ssize_t i = 0, at = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(prepared, i);
        int32_t size, crc, flag;
        int64_t code;
        if (as_int32(PyTuple_GET_ITEM(item, P_SIZE), "record size", &size) < 0 ||
            as_int32(PyTuple_GET_ITEM(item, P_BODY_CRC), "body CRC", &crc) < 0 ||
            as_int32(PyTuple_GET_ITEM(item, P_FLAG), "flag", &flag) < 0 ||
            as_int64(PyTuple_GET_ITEM(item, P_TAGS_CODE), "tags code", &code) < 0)
            goto fail;
        if (i > 0) {
            /* One prepare() call shares these fields (codec.pack refuses a mixed list). */
            int32_t s2, r2;
            int64_t b2, p2;
            if (as_int32(PyTuple_GET_ITEM(item, P_SYS_FLAG), "sys flag", &s2) < 0 ||
                as_int64(PyTuple_GET_ITEM(item, P_BORN_TIMESTAMP), "born timestamp", &b2) < 0 ||
                as_int32(PyTuple_GET_ITEM(item, P_RECONSUME_TIMES), "reconsume times", &r2) < 0 ||
                as_int64(PyTuple_GET_ITEM(item, P_PREPARED_TRANSACTION_OFFSET), "prepared offset",
                         &p2) < 0)
                goto fail;
            if (s2 != sflag || b2 != born || r2 != recon || p2 != ptx) {
                PyErr_SetString(PyExc_ValueError,
                                "append: the items of one prepare() call only");
                goto fail;
            }
        }
        PyObject *off = PyLong_FromLongLong(phys + at);
        if (off == NULL)
            goto fail;
        PyList_SET_ITEM(offsets, i, off);
        at += size;
    }
    unsigned char middle[MIDDLE_SIZE];
    record_middle(middle, sflag, born, born_ip, born_port, store_ts, store_ip, store_port, recon,
                  ptx);
    /* The records, then the units: a unit never points at bytes not yet written. */
    unsigned char *p = (unsigned char *)seg.buf + wpos;
    long long at = phys;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(prepared, i);
        PyObject *body = PyTuple_GET_ITEM(item, P_BODY);
        PyObject *trailer = PyTuple_GET_ITEM(item, P_TRAILER);
        Py_ssize_t body_len = PyBytes_GET_SIZE(body);
        Py_ssize_t trailer_len = PyBytes_GET_SIZE(trailer);
        Py_ssize_t size = HEADER_SIZE + body_len + trailer_len;
        record_write(p, size, MESSAGE_MAGIC_CODE,
                     (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(item, P_BODY_CRC)), queue_id,
                     (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(item, P_FLAG)), qoff + i, at, middle,
                     body, trailer);
        p += size;
        at += size;
    }
    unsigned char *u = (unsigned char *)cq.buf + cq_pos;
    at = phys;
    for (Py_ssize_t i = 0; i < n; i++, u += UNIT_SIZE) {
        PyObject *item = PyTuple_GET_ITEM(prepared, i);
        long long size = PyLong_AsLongLong(PyTuple_GET_ITEM(item, P_SIZE));
        long long code = PyLong_AsLongLong(PyTuple_GET_ITEM(item, P_TAGS_CODE));
        /* As ConsumeQueue.append_units: tags code, then offset, then size last. */
        put_be64(u + UNIT_POS_TAGS_CODE, (uint64_t)code);
        put_be64(u + UNIT_POS_OFFSET, (uint64_t)at);
        put_be32(u + UNIT_POS_SIZE, (uint32_t)size);
        at += size;
    }
    /* Keys last, as the dispatcher writes them: recovery re-indexes what lags behind. */
    if (imap != NULL) {
        write_entries((unsigned char *)ix.buf, topic, keys, offsets, store_ts, slots,
                      entries_at, &st);
        PyBuffer_Release(&ix);
    }
    PyBuffer_Release(&cq);
    PyBuffer_Release(&seg);
    if (imap == NULL)
        return Py_BuildValue("NLO", offsets, at, Py_None);
    return Py_BuildValue("NL(LLLLLL)", offsets, at, st.count, st.new_slots, st.begin_phy,
                         st.begin_ts, st.end_phy, st.end_ts);
fail:
    if (ix.obj != NULL)
        PyBuffer_Release(&ix);
    PyBuffer_Release(&cq);
    PyBuffer_Release(&seg);
    Py_DECREF(offsets);
    return NULL;
}

/* --- the key index entries of a put (indexfile.py_put_entries, _keyindex.c) --- */

/* Check the keys: a list per record (or None), of str. Returns the number of entries. */
static Py_ssize_t
count_keys(PyObject *keys, Py_ssize_t n)
{
    if (!PyList_Check(keys) || PyList_GET_SIZE(keys) != n) {
        PyErr_SetString(PyExc_TypeError, "append: the keys are a list, one item per record");
        return -1;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *ks = PyList_GET_ITEM(keys, i);
        if (ks == Py_None)
            continue;
        if (!PyList_Check(ks)) {
            PyErr_SetString(PyExc_TypeError, "append: a record's keys are a list or None");
            return -1;
        }
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(ks); k++) {
            if (!PyUnicode_Check(PyList_GET_ITEM(ks, k))) {
                PyErr_SetString(PyExc_TypeError, "append: a key must be a str");
                return -1;
            }
            total++;
        }
    }
    return total;
}

/* Write the entries of every record's keys (as py_put_entries, which the caller made sure
 * will not fill the file): the entry linked to its slot's head, then the slot. */
static void
write_entries(unsigned char *mm, PyObject *topic, PyObject *keys, PyObject *offsets,
              long long ts, long long slots, long long entries_at, IndexState *st)
{
    uint32_t head = 31u * keyhash_fold(0, topic) + '#';
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys); i++) {
        PyObject *ks = PyList_GET_ITEM(keys, i);
        if (ks == Py_None)
            continue;
        long long phy = PyLong_AsLongLong(PyList_GET_ITEM(offsets, i));
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(ks); k++) {
            PyObject *key = PyList_GET_ITEM(ks, k);
            if (PyUnicode_GET_LENGTH(key) == 0)
                continue;
            if (st->count == 1) {
                st->begin_phy = phy;
                st->begin_ts = ts;
            }
            int32_t h = keyhash_finish(keyhash_fold(head, key));
            unsigned char *slot = mm + INDEX_HEADER_SIZE_ + ((long long)h % slots) * SLOT_SIZE_;
            long long prev = (int32_t)get_be32(slot);
            if (prev <= 0 || prev >= st->count) {
                prev = 0;
                st->new_slots++;
            }
            long long diff = 0;
            if (st->begin_ts > 0 && ts > st->begin_ts) {
                diff = (ts - st->begin_ts) / 1000;
                if (diff > 0x7FFFFFFFLL)
                    diff = 0x7FFFFFFFLL;
            }
            unsigned char *entry = mm + entries_at + st->count * ENTRY_SIZE_;
            put_be32(entry, (uint32_t)h);
            put_be64(entry + 4, (uint64_t)phy);
            put_be32(entry + 12, (uint32_t)diff);
            put_be32(entry + 16, (uint32_t)prev);
            put_be32(slot, (uint32_t)st->count);
            st->count++;
            st->end_phy = phy;
            st->end_ts = ts;
        }
    }
}

static PyMethodDef methods[] = {
    {"append", put_append, METH_VARARGS, append_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "mqcore.plugins.store_mmap._put",
    "C write of an mmap store put (optional; see fastput.py and codec.pack).",
    -1,
    methods,
};

PyMODINIT_FUNC
PyInit__put(void)
{
    return PyModule_Create(&module);
}
