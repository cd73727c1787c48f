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

/* The consume-queue units of ``prepared``'s records from ``u`` on, the first record at
 * commit-log offset ``at`` (as ConsumeQueue.append_units: tags code, then offset, then size
 * last). */
static void
write_units(unsigned char *u, PyObject *prepared, long long at)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(prepared); i++, u += UNIT_SIZE) {
        PyObject *item = PyTuple_GET_ITEM(prepared, i);
        long long size = PyLong_AsLongLong(PyTuple_GET_ITEM(item, P_SIZE));
        long long code = PyLong_AsLongLong(PyTuple_GET_ITEM(item, P_TAGS_CODE));
        put_be64(u + UNIT_POS_TAGS_CODE, (uint64_t)code);
        put_be64(u + UNIT_POS_OFFSET, (uint64_t)at);
        put_be32(u + UNIT_POS_SIZE, (uint32_t)size);
        at += size;
    }
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
    write_units((unsigned char *)cq.buf + cq_pos, prepared, phys);
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

/* One key's entry (as py_put_entries): linked to its slot's head, then the slot. */
static void
write_key(unsigned char *mm, uint32_t head, PyObject *key, long long phy, long long ts,
          long long slots, long long entries_at, IndexState *st)
{
    if (PyUnicode_GET_LENGTH(key) == 0)
        return;
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
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(ks); k++)
            write_key(mm, head, PyList_GET_ITEM(ks, k), phy, ts, slots, entries_at, st);
    }
}

/* --- a group of puts (several queues) in one call --- */

/* One put of a group: its arguments and what the checks found. */
typedef struct {
    PyObject *prepared; /* owned tuple of the items */
    PyObject *topic, *keys, *uniqs; /* borrowed (the job tuple holds them) */
    PyObject *uniqs_owned;          /* the tuple made of uniqs, or NULL */
    int32_t queue_id, born_port, sflag, recon;
    long long qoff, store_ts, phys, total;
    int64_t born, ptx;
    const char *born_ip;
    PyObject *qmap;
    Py_ssize_t qpos;
    Py_buffer cq;
} Job;

/* Check one job's records (sizes, the fields one prepare() call shares) and its keys or
 * unique ids; sets its total, shared fields and number of index entries. */
static int
check_job(Job *j, Py_ssize_t *entries)
{
    PyObject *prepared = j->prepared;
    Py_ssize_t n = PyTuple_GET_SIZE(prepared);
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "append_group: a put with no record");
        return -1;
    }
    j->total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = item_at(prepared, i);
        int32_t size, crc, flag, s2, r2;
        int64_t code, b2, p2;
        if (item == NULL || as_int32(PyTuple_GET_ITEM(item, P_SIZE), "record size", &size) < 0 ||
            as_int32(PyTuple_GET_ITEM(item, P_BODY_CRC), "body CRC", &crc) < 0 ||
            as_int32(PyTuple_GET_ITEM(item, P_FLAG), "flag", &flag) < 0 ||
            as_int64(PyTuple_GET_ITEM(item, P_TAGS_CODE), "tags code", &code) < 0 ||
            as_int32(PyTuple_GET_ITEM(item, P_SYS_FLAG), "sys flag", &s2) < 0 ||
            as_int64(PyTuple_GET_ITEM(item, P_BORN_TIMESTAMP), "born timestamp", &b2) < 0 ||
            as_int32(PyTuple_GET_ITEM(item, P_RECONSUME_TIMES), "reconsume times", &r2) < 0 ||
            as_int64(PyTuple_GET_ITEM(item, P_PREPARED_TRANSACTION_OFFSET), "prepared offset",
                     &p2) < 0)
            return -1;
        if ((Py_ssize_t)size != HEADER_SIZE + PyBytes_GET_SIZE(PyTuple_GET_ITEM(item, P_BODY)) +
                                    PyBytes_GET_SIZE(PyTuple_GET_ITEM(item, P_TRAILER))) {
            PyErr_Format(PyExc_ValueError,
                         "prepared item %zd: record size %d does not match its body and "
                         "trailer", i, (int)size);
            return -1;
        }
        if (i == 0) {
            j->sflag = s2;
            j->born = b2;
            j->recon = r2;
            j->ptx = p2;
        } else if (s2 != j->sflag || b2 != j->born || r2 != j->recon || p2 != j->ptx) {
            /* One prepare() call shares these fields (codec.pack refuses a mixed list). */
            PyErr_SetString(PyExc_ValueError, "append_group: the items of one prepare() call only");
            return -1;
        }
        j->total += size;
    }
    if (j->keys != Py_None) {
        Py_ssize_t found = count_keys(j->keys, n);
        if (found < 0)
            return -1;
        *entries += found;
    } else if (j->uniqs != Py_None) {
        if (!PyList_Check(j->uniqs) || PyList_GET_SIZE(j->uniqs) != n) {
            PyErr_SetString(PyExc_TypeError,
                            "append_group: the unique ids are a list, one item per record");
            return -1;
        }
        /* A tuple of them: nothing run by an allocation below can change them. */
        j->uniqs = j->uniqs_owned = PyList_AsTuple(j->uniqs);
        if (j->uniqs == NULL)
            return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *u = PyTuple_GET_ITEM(j->uniqs, i);
            if (u == Py_None)
                continue;
            if (!PyUnicode_Check(u)) {
                PyErr_SetString(PyExc_TypeError, "append_group: a unique id must be a str");
                return -1;
            }
            *entries += 1;
        }
    }
    return 0;
}

/* The job's put results: (prefix + 16 hex digits of the offset, queue offset, offset,
 * store timestamp, size) per record. */
static PyObject *
job_results(Job *j, PyTypeObject *cls, PyObject *prefix)
{
    static const char hex[] = "0123456789ABCDEF";
    Py_ssize_t n = PyTuple_GET_SIZE(j->prepared);
    Py_ssize_t plen = PyUnicode_GET_LENGTH(prefix);
    const char *pchars = (const char *)PyUnicode_DATA(prefix);
    PyObject *ts_shared = PyLong_FromLongLong(j->store_ts); /* one for the whole put */
    if (ts_shared == NULL)
        return NULL;
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        Py_DECREF(ts_shared);
        return NULL;
    }
    long long at = j->phys;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *size = Py_NewRef(PyTuple_GET_ITEM(PyTuple_GET_ITEM(j->prepared, i), P_SIZE));
        long long sz = PyLong_AsLongLong(size);
        PyObject *msg_id = PyUnicode_New(plen + 16, 127);
        PyObject *qoff = PyLong_FromLongLong(j->qoff + i);
        PyObject *off = PyLong_FromLongLong(at);
        PyObject *ts = Py_NewRef(ts_shared);
        if (msg_id == NULL || qoff == NULL || off == NULL) {
            Py_DECREF(size);
            Py_XDECREF(msg_id);
            Py_XDECREF(qoff);
            Py_XDECREF(off);
            Py_DECREF(ts);
            Py_DECREF(ts_shared);
            Py_DECREF(out);
            return NULL;
        }
        char *c = (char *)PyUnicode_DATA(msg_id);
        memcpy(c, pchars, (size_t)plen);
        uint64_t u = (uint64_t)at;
        for (int k = 15; k >= 0; k--, u >>= 4)
            c[plen + k] = hex[u & 0xF];
        PyObject *result = make_result(cls, msg_id, qoff, off, ts, size);
        if (result == NULL) {
            Py_DECREF(ts_shared);
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, result);
        at += sz;
    }
    Py_DECREF(ts_shared);
    return out;
}

PyDoc_STRVAR(append_group_doc,
"append_group(segment, position, commitlog_offset, store_ip, store_port, prefix, cls,\n"
"             jobs, index=None) -> (results, end, index_state)\n\n"
"append() for several puts at once, one after the other in the commit log from\n"
"``position`` of ``segment`` (commit-log offset ``commitlog_offset``). Each job is\n"
"(prepared, queue_id, queue_offset, store_timestamp, born_ip, born_port, queue_map,\n"
"queue_position, topic, keys, uniqs): ``keys`` as append()'s (a list per record, or\n"
"None), else ``uniqs`` (a list of str or None per record, or None) are the keys. All the\n"
"records are written first, then the units, then the index entries; ``index`` is None or\n"
"(map, slots, entries_at, limit, count, begin_phy, begin_ts, end_phy, end_ts). Returns each\n"
"job's put results (``cls`` tuples: prefix + 16 upper-case hex digits of the offset, queue\n"
"offset, offset, store timestamp, size), the offset past the last record and the index\n"
"state as append()'s. Raises, writing nothing, when anything does not fit.");

static PyObject *
put_append_group(PyObject *self, PyObject *args)
{
    PyObject *seg_obj, *prefix, *given, *index = Py_None;
    PyTypeObject *cls;
    Py_ssize_t wpos;
    long long phys;
    const char *store_ip;
    Py_ssize_t store_ip_len;
    int32_t store_port;
    if (!PyArg_ParseTuple(args, "OnLy#iUO!O!|O:append_group", &seg_obj, &wpos, &phys,
                          &store_ip, &store_ip_len, &store_port, &prefix, &PyType_Type, &cls,
                          &PyList_Type, &given, &index))
        return NULL;
    if (store_ip_len != 4) {
        PyErr_SetString(PyExc_ValueError, "append_group: host addresses must be 4 bytes (IPv4)");
        return NULL;
    }
    if (!PyType_IsSubtype(cls, &PyTuple_Type) || !PyUnicode_IS_ASCII(prefix)) {
        PyErr_SetString(PyExc_TypeError,
                        "append_group: cls must be a tuple subclass, prefix ASCII text");
        return NULL;
    }
    PyObject *jobs_t = PyList_AsTuple(given);
    if (jobs_t == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(jobs_t);
    Job *jobs = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Job));
    PyObject *result = NULL, *results = NULL;
    Py_buffer seg = {0}, ix = {0};
    PyObject *imap = NULL;
    long long slots = 0, entries_at = 0, limit = 0;
    IndexState st = {0, 0, 0, 0, 0, 0};
    Py_ssize_t got = 0; /* jobs with their tuple and queue buffer taken */
    if (jobs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "append_group: nothing to write");
        goto done;
    }
    if (index != Py_None) {
        if (!PyTuple_Check(index) ||
            !PyArg_ParseTuple(index, "OLLLLLLLL:append_group index", &imap, &slots,
                              &entries_at, &limit, &st.count, &st.begin_phy, &st.begin_ts,
                              &st.end_phy, &st.end_ts)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "append_group: index is a tuple or None");
            goto done;
        }
    }
    /* Check everything before writing anything. */
    long long at = phys, total = 0;
    Py_ssize_t entries = 0;
    for (; got < n; got++) {
        Job *j = &jobs[got];
        PyObject *job = PyTuple_GET_ITEM(jobs_t, got), *prepared, *born_ip;
        int64_t qoff, store_ts, qpos;
        /* Read field by field (PyArg_ParseTuple's format costs more than the writes). */
        if (!PyTuple_Check(job) || PyTuple_GET_SIZE(job) != 11) {
            PyErr_SetString(PyExc_TypeError, "append_group: a job is an 11-field tuple");
            goto done;
        }
        prepared = PyTuple_GET_ITEM(job, 0);
        born_ip = PyTuple_GET_ITEM(job, 4);
        j->qmap = PyTuple_GET_ITEM(job, 6);
        j->topic = PyTuple_GET_ITEM(job, 8);
        j->keys = PyTuple_GET_ITEM(job, 9);
        j->uniqs = PyTuple_GET_ITEM(job, 10);
        if (!PyList_Check(prepared) || !PyUnicode_Check(j->topic)) {
            PyErr_SetString(PyExc_TypeError,
                            "append_group: a job's records are a list, its topic a str");
            goto done;
        }
        if (as_int32(PyTuple_GET_ITEM(job, 1), "queue id", &j->queue_id) < 0 ||
            as_int64(PyTuple_GET_ITEM(job, 2), "queue offset", &qoff) < 0 ||
            as_int64(PyTuple_GET_ITEM(job, 3), "store timestamp", &store_ts) < 0 ||
            as_int32(PyTuple_GET_ITEM(job, 5), "born port", &j->born_port) < 0 ||
            as_int64(PyTuple_GET_ITEM(job, 7), "queue position", &qpos) < 0)
            goto done;
        if (!PyBytes_Check(born_ip) || PyBytes_GET_SIZE(born_ip) != 4) {
            PyErr_SetString(PyExc_ValueError,
                            "append_group: host addresses must be 4 bytes (IPv4)");
            goto done;
        }
        j->born_ip = PyBytes_AS_STRING(born_ip);
        j->qoff = qoff;
        j->store_ts = store_ts;
        j->qpos = (Py_ssize_t)qpos;
        j->prepared = PyList_AsTuple(prepared);
        if (j->prepared == NULL)
            goto done;
        if (PyObject_GetBuffer(j->qmap, &j->cq, PyBUF_WRITABLE) < 0) {
            Py_CLEAR(j->prepared);
            goto done;
        }
        if (check_job(j, &entries) < 0) {
            got++;
            goto done;
        }
        if (j->qpos < 0 || j->qpos + PyTuple_GET_SIZE(j->prepared) * UNIT_SIZE > j->cq.len) {
            PyErr_SetString(PyExc_ValueError, "append_group: the units do not fit their file");
            got++;
            goto done;
        }
        j->phys = at;
        at += j->total;
        total += j->total;
    }
    if (entries > 0 && imap == NULL) {
        PyErr_SetString(PyExc_ValueError, "append_group: keys to index and no index given");
        goto done;
    }
    if (PyObject_GetBuffer(seg_obj, &seg, PyBUF_WRITABLE) < 0) {
        seg.obj = NULL;
        goto done;
    }
    if (imap != NULL) {
        if (PyObject_GetBuffer(imap, &ix, PyBUF_WRITABLE) < 0) {
            ix.obj = NULL;
            goto done;
        }
        if (slots < 1 || st.count < 1 || entries_at < INDEX_HEADER_SIZE_ + slots * SLOT_SIZE_ ||
            st.count + entries > limit || (long long)ix.len < entries_at + limit * ENTRY_SIZE_) {
            PyErr_SetString(PyExc_ValueError,
                            "append_group: the index entries do not fit their file");
            goto done;
        }
    }
    if (wpos < 0 || (long long)wpos + total > (long long)seg.len) {
        PyErr_SetString(PyExc_ValueError, "append_group: the records do not fit their file");
        goto done;
    }
    /* The results before the writes: a failed allocation writes nothing. */
    results = PyList_New(n);
    if (results == NULL)
        goto done;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *r = job_results(&jobs[k], cls, prefix);
        if (r == NULL)
            goto done;
        PyList_SET_ITEM(results, k, r);
    }
    /* The records of every job, then the units: a unit never points at unwritten bytes. */
    unsigned char *p = (unsigned char *)seg.buf + wpos;
    for (Py_ssize_t k = 0; k < n; k++) {
        Job *j = &jobs[k];
        unsigned char middle[MIDDLE_SIZE];
        record_middle(middle, j->sflag, j->born, j->born_ip, j->born_port, j->store_ts,
                      store_ip, store_port, j->recon, j->ptx);
        long long rat = j->phys;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(j->prepared); i++) {
            PyObject *item = PyTuple_GET_ITEM(j->prepared, i);
            PyObject *body = PyTuple_GET_ITEM(item, P_BODY);
            PyObject *trailer = PyTuple_GET_ITEM(item, P_TRAILER);
            Py_ssize_t size = HEADER_SIZE + PyBytes_GET_SIZE(body) + PyBytes_GET_SIZE(trailer);
            record_write(p, size, MESSAGE_MAGIC_CODE,
                         (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(item, P_BODY_CRC)), j->queue_id,
                         (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(item, P_FLAG)), j->qoff + i, rat,
                         middle, body, trailer);
            p += size;
            rat += size;
        }
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        Job *j = &jobs[k];
        write_units((unsigned char *)j->cq.buf + j->qpos, j->prepared, j->phys);
    }
    /* Keys last, as the dispatcher writes them: recovery re-indexes what lags behind. */
    if (entries > 0) {
        unsigned char *mm = (unsigned char *)ix.buf;
        for (Py_ssize_t k = 0; k < n; k++) {
            Job *j = &jobs[k];
            if (j->keys == Py_None && j->uniqs == Py_None)
                continue;
            uint32_t head = 31u * keyhash_fold(0, j->topic) + '#';
            long long kat = j->phys;
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(j->prepared); i++) {
                PyObject *item = PyTuple_GET_ITEM(j->prepared, i);
                if (j->keys != Py_None) {
                    PyObject *ks = PyList_GET_ITEM(j->keys, i);
                    if (ks != Py_None)
                        for (Py_ssize_t q = 0; q < PyList_GET_SIZE(ks); q++)
                            write_key(mm, head, PyList_GET_ITEM(ks, q), kat, j->store_ts, slots,
                                      entries_at, &st);
                } else {
                    PyObject *u = PyTuple_GET_ITEM(j->uniqs, i);
                    if (u != Py_None)
                        write_key(mm, head, u, kat, j->store_ts, slots, entries_at, &st);
                }
                kat += PyLong_AsLongLong(PyTuple_GET_ITEM(item, P_SIZE));
            }
        }
    }
    if (imap == NULL)
        result = Py_BuildValue("OLO", results, at, Py_None);
    else
        result = Py_BuildValue("OL(LLLLLL)", results, at, st.count, st.new_slots, st.begin_phy,
                               st.begin_ts, st.end_phy, st.end_ts);
done:
    Py_XDECREF(results);
    if (ix.obj != NULL)
        PyBuffer_Release(&ix);
    if (seg.obj != NULL)
        PyBuffer_Release(&seg);
    if (jobs != NULL) {
        for (Py_ssize_t k = 0; k < got; k++) {
            if (jobs[k].prepared != NULL) {
                PyBuffer_Release(&jobs[k].cq);
                Py_DECREF(jobs[k].prepared);
                Py_XDECREF(jobs[k].uniqs_owned);
            }
        }
        PyMem_Free(jobs);
    }
    Py_DECREF(jobs_t);
    return result;
}

static PyMethodDef methods[] = {
    {"append", put_append, METH_VARARGS, append_doc},
    {"append_group", put_append_group, METH_VARARGS, append_group_doc},
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
