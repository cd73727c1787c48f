/*
 * mqcore.contrib.spark._arrow: the Spark source's and sink's loops over Arrow buffers, in C.
 *
 * record_columns() builds the Arrow columns of stored records in one pass over a batch
 * (the reference is mqcore.contrib.spark.columns.py_record_columns); arrow_prepare() turns
 * a batch's Arrow columns into prepared records (mqcore.contrib.spark.writing), and
 * arrow_batches() into SEND_BATCH_MESSAGE bodies (mqcore.contrib.spark.netbatch). Optional:
 * without it the Python code serves, and the tests hold both to the same results.
 */
#include "speedups.h"

/* --- Arrow columns of stored records (mqcore.contrib.spark.columns) ------------------- */

/* Columns, in the order of mqcore.contrib.spark.records.COLUMNS. */
enum {
    COL_TOPIC, COL_QUEUE_ID, COL_QUEUE_OFFSET, COL_COMMITLOG_OFFSET, COL_MSG_ID, COL_TAGS,
    COL_KEYS, COL_PROPERTIES, COL_BORN_TS, COL_STORE_TS, COL_RECONSUME, COL_BODY, NCOLS
};
#define WANTS(c) (wanted & (1L << (c)))
#define PROPERTY_COLS ((1L << COL_TAGS) | (1L << COL_KEYS) | (1L << COL_PROPERTIES))

/* One record picked for the batch; ``inflated`` holds its body when it was stored
 * compressed and the body column is wanted (a new reference), else NULL. */
typedef struct {
    const unsigned char *rec;
    Py_ssize_t body_len, topic_len, props_len;
    PyObject *inflated;
} picked_t;

/* Raise ``error(message, offset=offset)`` (the store's corruption error). */
static void corrupt(PyObject *error, long long offset, const char *fmt, ...)
{
    char reason[200];
    va_list ap;
    va_start(ap, fmt);
    PyOS_vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    PyObject *msg = PyUnicode_FromFormat("record at commit-log offset %lld: %s", offset, reason);
    PyObject *kw = msg ? Py_BuildValue("{s:L}", "offset", offset) : NULL;
    PyObject *args = kw ? PyTuple_Pack(1, msg) : NULL;
    PyObject *exc = args ? PyObject_Call(error, args, kw) : NULL;
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    Py_XDECREF(args);
    Py_XDECREF(kw);
    Py_XDECREF(msg);
}

/* Check the record of ``avail`` bytes at ``rec`` (``usize``: its size in the consume queue,
 * or LLONG_MIN); on success fill ``p`` and return its size. The checks and their order are
 * py_record_columns', so both raise the same error for the same bytes. */
static Py_ssize_t check_one(const unsigned char *rec, Py_ssize_t avail, long long usize,
                            long long offset, PyObject *error, picked_t *p)
{
    if (avail < MIN_RECORD_SIZE) {
        corrupt(error, offset, "truncated: %zd bytes left, a record takes at least %d", avail,
                MIN_RECORD_SIZE);
        return -1;
    }
    int32_t size = (int32_t)get_be32(rec);
    if (usize != LLONG_MIN && size != usize) {
        corrupt(error, offset, "its header says %d bytes, its consume-queue unit %lld",
                (int)size, usize);
        return -1;
    }
    uint32_t magic = get_be32(rec + POS_MAGIC_CODE);
    if (magic != MESSAGE_MAGIC_CODE) {
        corrupt(error, offset, "bad magic code 0x%08X", (unsigned int)magic);
        return -1;
    }
    if (size < MIN_RECORD_SIZE) {
        corrupt(error, offset, "impossible record size %d", (int)size);
        return -1;
    }
    if (size > avail) {
        corrupt(error, offset, "%d bytes long, only %zd bytes left", (int)size, avail);
        return -1;
    }
    if (get_be32(rec + POS_SYS_FLAG) & V6_FLAGS) {
        corrupt(error, offset, "IPv6 hosts, which mqcore does not read");
        return -1;
    }
    int32_t body_len = (int32_t)get_be32(rec + POS_BODY_LENGTH);
    if (body_len < 0 || (Py_ssize_t)HEADER_SIZE + body_len + 3 > size) {
        corrupt(error, offset, "bad body length %d", (int)body_len);
        return -1;
    }
    Py_ssize_t tpos = HEADER_SIZE + body_len;
    Py_ssize_t tlen = rec[tpos];
    Py_ssize_t ppos = tpos + 1 + tlen;
    if (ppos + 2 > size) {
        corrupt(error, offset, "bad topic length %zd", tlen);
        return -1;
    }
    Py_ssize_t plen = ((Py_ssize_t)rec[ppos] << 8) | rec[ppos + 1];
    if (ppos + 2 + plen != size) {
        corrupt(error, offset, "fields add up to %zd bytes, header says %d", ppos + 2 + plen,
                (int)size);
        return -1;
    }
    p->rec = rec;
    p->body_len = body_len;
    p->topic_len = tlen;
    p->props_len = plen;
    return size;
}

/* The last TAGS value of a property string (``*tag``, ``*len``): 1 if there is one. */
static int find_tag(const unsigned char *text, Py_ssize_t plen, const unsigned char **tag,
                    Py_ssize_t *len)
{
    int found = 0;
    Py_ssize_t start = 0;
    while (start < plen) {
        const unsigned char *item = text + start;
        const unsigned char *stop = memchr(item, 0x02, (size_t)(plen - start));
        Py_ssize_t item_len = stop ? stop - item : plen - start;
        start += item_len + 1;
        if (item_len >= 5 && memcmp(item, "TAGS\x01", 5) == 0) {
            *tag = item + 5;
            *len = item_len - 5;
            found = 1;
        }
    }
    return found;
}

/* Whether ``tag`` is one of the bytes objects of the tuple ``names``. */
static int tag_in(PyObject *names, const unsigned char *tag, Py_ssize_t len)
{
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(names); k++) {
        PyObject *name = PyTuple_GET_ITEM(names, k);
        if (PyBytes_GET_SIZE(name) == len && memcmp(PyBytes_AS_STRING(name), tag, (size_t)len) == 0)
            return 1;
    }
    return 0;
}

/* A new bytes object of ``n`` bytes (to fill), or NULL with an exception. */
static PyObject *new_bytes(Py_ssize_t n)
{
    return PyBytes_FromStringAndSize(NULL, n);
}

#define BYTES(o) ((unsigned char *)PyBytes_AS_STRING(o))

PyDoc_STRVAR(record_columns_doc,
"record_columns(spans, wanted, ts_low, ts_high, end_offset, error, tags, inflate)\n"
"    -> (rows, done, columns)\n\n"
"Arrow buffers of the columns of stored records, in one pass over a batch (see\n"
"mqcore.contrib.spark.columns.py_record_columns, the reference). inflate(body, offset)\n"
"returns the body of a record stored compressed (sys flag bit 0).");

static PyObject *speedups_record_columns(PyObject *self, PyObject *args)
{
    PyObject *spans, *ts_low_obj, *ts_high_obj, *error, *tags_filter, *inflate;
    long wanted;
    long long end_offset;
    if (!PyArg_ParseTuple(args, "O!lOOLOOO:record_columns", &PyList_Type, &spans, &wanted,
                          &ts_low_obj, &ts_high_obj, &end_offset, &error, &tags_filter,
                          &inflate))
        return NULL;
    /* (tags codes, tags): keep records whose unit holds one of the codes and whose TAGS is
     * one of the tags (ReadFilter's two stages), before their bodies are touched. */
    PyObject *filter_codes = NULL, *filter_tags = NULL;
    long long codes[64];
    Py_ssize_t ncodes = 0;
    if (tags_filter != Py_None) {
        if (!PyTuple_Check(tags_filter) || PyTuple_GET_SIZE(tags_filter) != 2 ||
            !PyTuple_Check(PyTuple_GET_ITEM(tags_filter, 0)) ||
            !PyTuple_Check(PyTuple_GET_ITEM(tags_filter, 1))) {
            PyErr_SetString(PyExc_TypeError, "record_columns: tags is (codes, names) tuples");
            return NULL;
        }
        filter_codes = PyTuple_GET_ITEM(tags_filter, 0);
        filter_tags = PyTuple_GET_ITEM(tags_filter, 1);
        ncodes = PyTuple_GET_SIZE(filter_codes);
        if (ncodes > 64) {
            PyErr_SetString(PyExc_ValueError, "record_columns: at most 64 tags codes");
            return NULL;
        }
        for (Py_ssize_t k = 0; k < ncodes; k++)
            if (as_int64(PyTuple_GET_ITEM(filter_codes, k), "tags code", (int64_t *)&codes[k]) < 0)
                return NULL;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(filter_tags); k++)
            if (!PyBytes_Check(PyTuple_GET_ITEM(filter_tags, k))) {
                PyErr_SetString(PyExc_TypeError, "record_columns: tags are bytes");
                return NULL;
            }
    }
    int has_low = ts_low_obj != Py_None, has_high = ts_high_obj != Py_None;
    long long ts_low = 0, ts_high = 0;
    if ((has_low && (ts_low = PyLong_AsLongLong(ts_low_obj)) == -1 && PyErr_Occurred()) ||
        (has_high && (ts_high = PyLong_AsLongLong(ts_high_obj)) == -1 && PyErr_Occurred()))
        return NULL;
    /* The spans are read through buffers held for the whole call (a snapshot of the list). */
    PyObject *seq = PySequence_Tuple(spans);
    if (seq == NULL)
        return NULL;
    Py_ssize_t nspans = PyTuple_GET_SIZE(seq);
    Py_buffer *bufs = PyMem_Calloc((size_t)(2 * nspans + 1), sizeof(Py_buffer));
    char *held = PyMem_Calloc((size_t)(2 * nspans + 1), 1);
    long long *bases = PyMem_Calloc((size_t)nspans + 1, sizeof(long long));
    picked_t *picked = NULL;
    Py_ssize_t n = 0; /* records picked (each owns its inflated body, if any) */
    PyObject *cols[NCOLS][5];
    PyObject *result = NULL;
    memset(cols, 0, sizeof(cols));
    if (bufs == NULL || held == NULL || bases == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t capacity = 0;
    for (Py_ssize_t s = 0; s < nspans; s++) {
        PyObject *span = PyTuple_GET_ITEM(seq, s);
        if (!PyTuple_Check(span) || PyTuple_GET_SIZE(span) != 3) {
            PyErr_SetString(PyExc_TypeError, "record_columns: a span is (buffer, units, base)");
            goto done;
        }
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(span, 0), &bufs[2 * s], PyBUF_SIMPLE) < 0)
            goto done;
        held[2 * s] = 1;
        PyObject *units = PyTuple_GET_ITEM(span, 1);
        bases[s] = PyLong_AsLongLong(PyTuple_GET_ITEM(span, 2));
        if (bases[s] == -1 && PyErr_Occurred())
            goto done;
        if (units == Py_None) {
            capacity += bufs[2 * s].len / MIN_RECORD_SIZE + 1;
            continue;
        }
        if (PyObject_GetBuffer(units, &bufs[2 * s + 1], PyBUF_SIMPLE) < 0)
            goto done;
        held[2 * s + 1] = 1;
        if (bufs[2 * s + 1].len % UNIT_SIZE) {
            PyErr_SetString(PyExc_ValueError, "record_columns: units are 20 bytes each");
            goto done;
        }
        capacity += bufs[2 * s + 1].len / UNIT_SIZE;
    }
    picked = PyMem_Malloc((size_t)(capacity + 1) * sizeof(picked_t));
    if (picked == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* Pass 1: check every record, pick those in the time range, measure the columns. */
    int want_props = (wanted & PROPERTY_COLS) != 0;
    int want_topic = WANTS(COL_TOPIC) != 0;
    int want_body = WANTS(COL_BODY) != 0;
    Py_ssize_t total_body = 0, total_topic = 0, total_props = 0;
    int finished = 0;
    for (Py_ssize_t s = 0; s < nspans && !finished; s++) {
        const unsigned char *buf = (const unsigned char *)bufs[2 * s].buf;
        Py_ssize_t len = bufs[2 * s].len;
        const unsigned char *units = held[2 * s + 1] ? bufs[2 * s + 1].buf : NULL;
        Py_ssize_t count = units ? bufs[2 * s + 1].len / UNIT_SIZE : -1;
        Py_ssize_t pos = 0;
        for (Py_ssize_t i = 0; units ? i < count : pos < len; i++) {
            long long usize = LLONG_MIN, offset;
            if (units) {
                offset = (long long)get_be64(units + i * UNIT_SIZE);
                usize = (int32_t)get_be32(units + i * UNIT_SIZE + UNIT_POS_SIZE);
                pos = (Py_ssize_t)(offset - bases[s]);
                if (filter_codes != NULL) { /* the consume-queue stage: the record unread */
                    long long code = (long long)get_be64(units + i * UNIT_SIZE + UNIT_POS_TAGS_CODE);
                    Py_ssize_t k = 0;
                    while (k < ncodes && codes[k] != code)
                        k++;
                    if (k == ncodes)
                        continue;
                }
            }
            else if (len - pos >= POS_PHYSICAL_OFFSET + 8)
                offset = (long long)get_be64(buf + pos + POS_PHYSICAL_OFFSET); /* as the record says */
            else
                offset = bases[s] + pos;
            picked_t *p = &picked[n];
            Py_ssize_t size;
            if (pos < 0 || pos > len) {
                corrupt(error, offset, "outside its segment of %zd bytes", len);
                goto done;
            }
            size = check_one(buf + pos, len - pos, usize, offset, error, p);
            if (size < 0)
                goto done;
            if ((long long)get_be64(p->rec + POS_QUEUE_OFFSET) >= end_offset) {
                finished = 1;
                break;
            }
            long long ts = (long long)get_be64(p->rec + POS_STORE_TIMESTAMP);
            if (!units)
                pos += size;
            if ((has_low && ts < ts_low) || (has_high && ts >= ts_high))
                continue;
            const unsigned char *topic = p->rec + HEADER_SIZE + p->body_len + 1;
            if (filter_tags != NULL) {
                const unsigned char *tag;
                Py_ssize_t tag_len;
                if (!find_tag(topic + p->topic_len + 2, p->props_len, &tag, &tag_len) ||
                    !tag_in(filter_tags, tag, tag_len))
                    continue;
            }
            if (want_topic && !utf8_ok(topic, p->topic_len)) {
                corrupt(error, offset, "the topic is not UTF-8");
                goto done;
            }
            if (want_props && !utf8_ok(topic + p->topic_len + 2, p->props_len)) {
                corrupt(error, offset, "the properties are not UTF-8");
                goto done;
            }
            p->inflated = NULL;
            if (want_body && (get_be32(p->rec + POS_SYS_FLAG) & COMPRESSED_FLAG)) {
                /* Rare (bodies over 4 KiB sent one at a time) and dear anyway: the
                 * reference's inflate() does it, and raises its error for both. */
                p->inflated = PyObject_CallFunction(inflate, "y#L", p->rec + HEADER_SIZE,
                                                    p->body_len, offset);
                if (p->inflated == NULL)
                    goto done;
                if (!PyBytes_Check(p->inflated)) {
                    Py_CLEAR(p->inflated);
                    PyErr_SetString(PyExc_TypeError, "record_columns: inflate returns bytes");
                    goto done;
                }
                total_body += PyBytes_GET_SIZE(p->inflated);
            }
            else
                total_body += p->body_len;
            total_topic += p->topic_len;
            total_props += p->props_len;
            n++;
        }
    }
    if (total_body > INT32_MAX || total_props > INT32_MAX) {
        PyErr_Format(PyExc_OverflowError,
                     "record_columns: %zd body bytes in one batch, more than an Arrow binary "
                     "column takes; read fewer records per batch", total_body);
        goto done;
    }
    /* Pass 2: allocate each wanted column's buffers and fill them. */
    Py_ssize_t bitmap = (n + 7) / 8;
    Py_ssize_t entries_bound = total_props + n; /* a map entry takes at least one byte */
    static const int fixed_cols[] = {COL_QUEUE_ID, COL_QUEUE_OFFSET, COL_COMMITLOG_OFFSET,
                                     COL_BORN_TS, COL_STORE_TS, COL_RECONSUME};
    static const int fixed_pos[] = {POS_QUEUE_ID, POS_QUEUE_OFFSET, POS_PHYSICAL_OFFSET, POS_BORN_TIMESTAMP,
                                    POS_STORE_TIMESTAMP, POS_RECONSUME_TIMES};
    static const int fixed_width[] = {4, 8, 8, 8, 8, 4};
    for (int f = 0; f < 6; f++) {
        int c = fixed_cols[f];
        if (!WANTS(c))
            continue;
        if ((cols[c][0] = new_bytes(n * fixed_width[f])) == NULL)
            goto done;
        unsigned char *out = BYTES(cols[c][0]);
        int at = fixed_pos[f];
        if (fixed_width[f] == 4)
            for (Py_ssize_t i = 0; i < n; i++) {
                int32_t v = (int32_t)get_be32(picked[i].rec + at);
                memcpy(out + 4 * i, &v, 4);
            }
        else
            for (Py_ssize_t i = 0; i < n; i++) {
                int64_t v = (int64_t)get_be64(picked[i].rec + at);
                memcpy(out + 8 * i, &v, 8);
            }
    }
    if (WANTS(COL_TOPIC)) {
        if ((cols[COL_TOPIC][0] = new_bytes(4 * (n + 1))) == NULL ||
            (cols[COL_TOPIC][1] = new_bytes(total_topic)) == NULL)
            goto done;
        int32_t *off = (int32_t *)BYTES(cols[COL_TOPIC][0]);
        unsigned char *data = BYTES(cols[COL_TOPIC][1]);
        int32_t at = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            off[i] = at;
            memcpy(data + at, picked[i].rec + HEADER_SIZE + picked[i].body_len + 1,
                   (size_t)picked[i].topic_len);
            at += (int32_t)picked[i].topic_len;
        }
        off[n] = at;
    }
    if (WANTS(COL_BODY)) {
        if ((cols[COL_BODY][0] = new_bytes(4 * (n + 1))) == NULL ||
            (cols[COL_BODY][1] = new_bytes(total_body)) == NULL)
            goto done;
        int32_t *off = (int32_t *)BYTES(cols[COL_BODY][0]);
        unsigned char *data = BYTES(cols[COL_BODY][1]);
        int32_t at = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            off[i] = at;
            PyObject *inflated = picked[i].inflated;
            if (inflated != NULL) {
                memcpy(data + at, PyBytes_AS_STRING(inflated), (size_t)PyBytes_GET_SIZE(inflated));
                at += (int32_t)PyBytes_GET_SIZE(inflated);
                continue;
            }
            memcpy(data + at, picked[i].rec + HEADER_SIZE, (size_t)picked[i].body_len);
            at += (int32_t)picked[i].body_len;
        }
        off[n] = at;
    }
    if (WANTS(COL_MSG_ID)) {
        static const char hex[] = "0123456789ABCDEF";
        if ((cols[COL_MSG_ID][0] = new_bytes(4 * (n + 1))) == NULL ||
            (cols[COL_MSG_ID][1] = new_bytes(32 * n)) == NULL)
            goto done;
        int32_t *off = (int32_t *)BYTES(cols[COL_MSG_ID][0]);
        unsigned char *data = BYTES(cols[COL_MSG_ID][1]);
        for (Py_ssize_t i = 0; i < n; i++) {
            off[i] = (int32_t)(32 * i);
            /* Store ip and port (8 bytes at 64), then the commit-log offset (8 at 28). */
            const unsigned char *r = picked[i].rec;
            unsigned char *d = data + 32 * i;
            for (int k = 0; k < 8; k++) {
                d[2 * k] = (unsigned char)hex[r[POS_STORE_HOST + k] >> 4];
                d[2 * k + 1] = (unsigned char)hex[r[POS_STORE_HOST + k] & 0xF];
                d[16 + 2 * k] = (unsigned char)hex[r[POS_PHYSICAL_OFFSET + k] >> 4];
                d[16 + 2 * k + 1] = (unsigned char)hex[r[POS_PHYSICAL_OFFSET + k] & 0xF];
            }
        }
        off[n] = (int32_t)(32 * n);
    }
    if (want_props) {
        int32_t *tag_off = NULL, *key_off = NULL, *map_off = NULL, *name_off = NULL,
                *value_off = NULL;
        unsigned char *tag_data = NULL, *key_data = NULL, *tag_valid = NULL, *key_valid = NULL,
                      *name_data = NULL, *value_data = NULL;
        if (WANTS(COL_TAGS)) {
            if ((cols[COL_TAGS][0] = new_bytes(4 * (n + 1))) == NULL ||
                (cols[COL_TAGS][1] = new_bytes(total_props)) == NULL ||
                (cols[COL_TAGS][2] = new_bytes(bitmap)) == NULL)
                goto done;
            tag_off = (int32_t *)BYTES(cols[COL_TAGS][0]);
            tag_data = BYTES(cols[COL_TAGS][1]);
            tag_valid = BYTES(cols[COL_TAGS][2]);
            memset(tag_valid, 0, (size_t)bitmap);
            tag_off[0] = 0;
        }
        if (WANTS(COL_KEYS)) {
            if ((cols[COL_KEYS][0] = new_bytes(4 * (n + 1))) == NULL ||
                (cols[COL_KEYS][1] = new_bytes(total_props)) == NULL ||
                (cols[COL_KEYS][2] = new_bytes(bitmap)) == NULL)
                goto done;
            key_off = (int32_t *)BYTES(cols[COL_KEYS][0]);
            key_data = BYTES(cols[COL_KEYS][1]);
            key_valid = BYTES(cols[COL_KEYS][2]);
            memset(key_valid, 0, (size_t)bitmap);
            key_off[0] = 0;
        }
        if (WANTS(COL_PROPERTIES)) {
            PyObject **m = cols[COL_PROPERTIES];
            if ((m[0] = new_bytes(4 * (n + 1))) == NULL ||
                (m[1] = new_bytes(4 * (entries_bound + 1))) == NULL ||
                (m[2] = new_bytes(total_props)) == NULL ||
                (m[3] = new_bytes(4 * (entries_bound + 1))) == NULL ||
                (m[4] = new_bytes(total_props)) == NULL)
                goto done;
            map_off = (int32_t *)BYTES(m[0]);
            name_off = (int32_t *)BYTES(m[1]);
            name_data = BYTES(m[2]);
            value_off = (int32_t *)BYTES(m[3]);
            value_data = BYTES(m[4]);
            map_off[0] = name_off[0] = value_off[0] = 0;
        }
        int32_t tag_at = 0, key_at = 0, name_at = 0, value_at = 0, entries = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            const unsigned char *text =
                picked[i].rec + HEADER_SIZE + picked[i].body_len + 1 + picked[i].topic_len + 2;
            Py_ssize_t plen = picked[i].props_len;
            const unsigned char *tag = NULL, *key = NULL;
            Py_ssize_t tag_len = 0, key_len = 0;
            Py_ssize_t start = 0;
            while (start <= plen) {
                const unsigned char *item = text + start;
                const unsigned char *stop = memchr(item, 0x02, (size_t)(plen - start));
                Py_ssize_t item_len = stop ? stop - item : plen - start;
                const unsigned char *sep = memchr(item, 0x01, (size_t)item_len);
                start += item_len + 1;
                if (sep == NULL)
                    continue; /* not name\x01value: skipped, as RocketMQ does */
                Py_ssize_t name_len = sep - item, value_len = item_len - name_len - 1;
                if (name_len == 4 && memcmp(item, "TAGS", 4) == 0) {
                    tag = sep + 1;
                    tag_len = value_len;
                    continue;
                }
                if (name_len == 4 && memcmp(item, "KEYS", 4) == 0) {
                    key = sep + 1;
                    key_len = value_len;
                    continue;
                }
                if ((name_len == 5 && memcmp(item, "DELAY", 5) == 0) || map_off == NULL)
                    continue;
                memcpy(name_data + name_at, item, (size_t)name_len);
                name_at += (int32_t)name_len;
                memcpy(value_data + value_at, sep + 1, (size_t)value_len);
                value_at += (int32_t)value_len;
                entries++;
                name_off[entries] = name_at;
                value_off[entries] = value_at;
            }
            if (tag_off != NULL) {
                if (tag != NULL) {
                    memcpy(tag_data + tag_at, tag, (size_t)tag_len);
                    tag_at += (int32_t)tag_len;
                    tag_valid[i >> 3] |= (unsigned char)(1 << (i & 7));
                }
                tag_off[i + 1] = tag_at;
            }
            if (key_off != NULL) {
                if (key != NULL) {
                    memcpy(key_data + key_at, key, (size_t)key_len);
                    key_at += (int32_t)key_len;
                    key_valid[i >> 3] |= (unsigned char)(1 << (i & 7));
                }
                key_off[i + 1] = key_at;
            }
            if (map_off != NULL)
                map_off[i + 1] = entries;
        }
        /* Trim the buffers sized for the worst case to what was written. */
        if ((tag_off && _PyBytes_Resize(&cols[COL_TAGS][1], tag_at) < 0) ||
            (key_off && _PyBytes_Resize(&cols[COL_KEYS][1], key_at) < 0))
            goto done;
        if (map_off) {
            PyObject **m = cols[COL_PROPERTIES];
            if (_PyBytes_Resize(&m[1], 4 * ((Py_ssize_t)entries + 1)) < 0 ||
                _PyBytes_Resize(&m[2], name_at) < 0 ||
                _PyBytes_Resize(&m[3], 4 * ((Py_ssize_t)entries + 1)) < 0 ||
                _PyBytes_Resize(&m[4], value_at) < 0)
                goto done;
        }
    }
    /* (rows, done, columns): a fixed-width column is one bytes object, a string column
     * (offsets, data, validity or None), properties (map offsets, key offsets, key data,
     * value offsets, value data); None for a column not wanted. */
    PyObject *out = PyTuple_New(NCOLS);
    if (out == NULL)
        goto done;
    for (int c = 0; c < NCOLS; c++) {
        PyObject *item;
        if (!WANTS(c))
            item = Py_NewRef(Py_None);
        else if (c == COL_PROPERTIES)
            item = PyTuple_Pack(5, cols[c][0], cols[c][1], cols[c][2], cols[c][3], cols[c][4]);
        else if (c == COL_TOPIC || c == COL_MSG_ID || c == COL_BODY || c == COL_TAGS ||
                 c == COL_KEYS)
            item = PyTuple_Pack(3, cols[c][0], cols[c][1], cols[c][2] ? cols[c][2] : Py_None);
        else
            item = Py_NewRef(cols[c][0]);
        if (item == NULL) {
            Py_DECREF(out);
            goto done;
        }
        PyTuple_SET_ITEM(out, c, item);
    }
    result = Py_BuildValue("nON", n, finished ? Py_True : Py_False, out);
done:
    for (int c = 0; c < NCOLS; c++)
        for (int k = 0; k < 5; k++)
            Py_XDECREF(cols[c][k]);
    if (bufs != NULL && held != NULL)
        for (Py_ssize_t k = 0; k < 2 * nspans; k++)
            if (held[k])
                PyBuffer_Release(&bufs[k]);
    PyMem_Free(bufs);
    PyMem_Free(held);
    PyMem_Free(bases);
    if (picked != NULL)
        for (Py_ssize_t i = 0; i < n; i++)
            Py_XDECREF(picked[i].inflated);
    PyMem_Free(picked);
    Py_DECREF(seq);
    return result;
}

/* --- Prepared records straight from Arrow columns (mqcore.contrib.spark.writing) ----- */

/* An Arrow string/binary column: validity bitmap (or NULL), int32 offsets, data. */
typedef struct {
    Py_buffer valid, offsets, data;
    int has_valid, present;
} strcol_t;

static void strcol_release(strcol_t *c)
{
    if (c->has_valid)
        PyBuffer_Release(&c->valid);
    if (c->present) {
        PyBuffer_Release(&c->offsets);
        PyBuffer_Release(&c->data);
    }
    c->has_valid = c->present = 0;
}

/* Fill ``c`` from ``(validity or None, offsets, data)``, or leave it absent for None;
 * ``n`` values: the offsets must hold n + 1 ints, non-decreasing within the data. */
static int strcol_get(PyObject *obj, Py_ssize_t n, const char *what, strcol_t *c)
{
    memset(c, 0, sizeof(*c));
    if (obj == Py_None)
        return 0;
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 3) {
        PyErr_Format(PyExc_TypeError, "%s: (validity, offsets, data) expected", what);
        return -1;
    }
    PyObject *v = PyTuple_GET_ITEM(obj, 0);
    if (v != Py_None) {
        if (PyObject_GetBuffer(v, &c->valid, PyBUF_SIMPLE) < 0)
            return -1;
        c->has_valid = 1;
        if (c->valid.len < (n + 7) / 8) {
            PyErr_Format(PyExc_ValueError, "%s: validity bitmap too short", what);
            strcol_release(c);
            return -1;
        }
    }
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(obj, 1), &c->offsets, PyBUF_SIMPLE) < 0) {
        strcol_release(c);
        return -1;
    }
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(obj, 2), &c->data, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&c->offsets);
        strcol_release(c);
        return -1;
    }
    c->present = 1;
    if (c->offsets.len < 4 * (n + 1)) {
        PyErr_Format(PyExc_ValueError, "%s: %zd offsets for %zd values", what,
                     c->offsets.len / 4, n);
        strcol_release(c);
        return -1;
    }
    const int32_t *off = (const int32_t *)c->offsets.buf;
    for (Py_ssize_t i = 0; i < n; i++)
        if (off[i] < 0 || off[i] > off[i + 1] || off[i + 1] > c->data.len) {
            PyErr_Format(PyExc_ValueError, "%s: bad offsets at value %zd", what, i);
            strcol_release(c);
            return -1;
        }
    return 0;
}

static int bit_set(const Py_buffer *b, Py_ssize_t i)
{
    return (((const unsigned char *)b->buf)[i >> 3] >> (i & 7)) & 1;
}

/* Value ``i`` of ``c``: 1 with ``*p``/``*len`` set, 0 when null or the column is absent. */
static int strcol_value(const strcol_t *c, Py_ssize_t i, const unsigned char **p, Py_ssize_t *len)
{
    if (!c->present || (c->has_valid && !bit_set(&c->valid, i)))
        return 0;
    const int32_t *off = (const int32_t *)c->offsets.buf;
    *p = (const unsigned char *)c->data.buf + off[i];
    *len = off[i + 1] - off[i];
    return 1;
}

/* Whether ``s`` holds a property separator (\x01 or \x02). */
static int has_separator(const unsigned char *s, Py_ssize_t n)
{
    return memchr(s, 1, (size_t)n) != NULL || memchr(s, 2, (size_t)n) != NULL;
}

/* The columns a row of the sink reads: body, tags, keys, the properties map, the replay
 * offsets. arrow_prepare and arrow_batches both read them through rowcols_get. */
typedef struct {
    strcol_t body, tags, keys, pkeys, pvalues;
    Py_buffer map_valid, map_offsets, replay_valid, replay_data;
    int has_map, has_map_valid, has_replay, has_replay_valid;
    const int32_t *moff;
    const int64_t *replay;
} rowcols_t;

static void rowcols_release(rowcols_t *c)
{
    strcol_release(&c->body);
    strcol_release(&c->tags);
    strcol_release(&c->keys);
    strcol_release(&c->pkeys);
    strcol_release(&c->pvalues);
    if (c->has_map_valid)
        PyBuffer_Release(&c->map_valid);
    if (c->has_map)
        PyBuffer_Release(&c->map_offsets);
    if (c->has_replay_valid)
        PyBuffer_Release(&c->replay_valid);
    if (c->has_replay)
        PyBuffer_Release(&c->replay_data);
    c->has_map = c->has_map_valid = c->has_replay = c->has_replay_valid = 0;
}
/* Fill ``c`` with the columns of ``n`` rows: (validity, offsets, data) for body, tags and
 * keys, (validity, offsets, names, values) for the properties map, (validity, int64 values)
 * for the replay offsets; None for an absent column (the body is required). */
static int rowcols_get(rowcols_t *c, Py_ssize_t n, PyObject *body, PyObject *tags,
                       PyObject *keys, PyObject *props, PyObject *replay)
{
    memset(c, 0, sizeof(*c));
    if (strcol_get(body, n, "body", &c->body) < 0 || strcol_get(tags, n, "tags", &c->tags) < 0 ||
        strcol_get(keys, n, "keys", &c->keys) < 0)
        return -1;
    if (!c->body.present) {
        PyErr_SetString(PyExc_ValueError, "the body column is required");
        return -1;
    }
    if (props != Py_None) {
        if (!PyTuple_Check(props) || PyTuple_GET_SIZE(props) != 4) {
            PyErr_SetString(PyExc_TypeError, "properties: (validity, offsets, keys, values)");
            return -1;
        }
        if (PyTuple_GET_ITEM(props, 0) != Py_None) {
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(props, 0), &c->map_valid, PyBUF_SIMPLE) < 0)
                return -1;
            c->has_map_valid = 1;
            if (c->map_valid.len < (n + 7) / 8) {
                PyErr_SetString(PyExc_ValueError, "properties: validity bitmap too short");
                return -1;
            }
        }
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(props, 1), &c->map_offsets, PyBUF_SIMPLE) < 0)
            return -1;
        c->has_map = 1;
        if (c->map_offsets.len < 4 * (n + 1)) {
            PyErr_SetString(PyExc_ValueError, "properties: too few offsets");
            return -1;
        }
        c->moff = (const int32_t *)c->map_offsets.buf;
        for (Py_ssize_t i = 0; i < n; i++)
            if (c->moff[i] < 0 || c->moff[i] > c->moff[i + 1]) {
                PyErr_Format(PyExc_ValueError, "properties: bad offsets at row %zd", i);
                return -1;
            }
        Py_ssize_t entries = n ? c->moff[n] : 0;
        if (strcol_get(PyTuple_GET_ITEM(props, 2), entries, "property names", &c->pkeys) < 0 ||
            strcol_get(PyTuple_GET_ITEM(props, 3), entries, "property values", &c->pvalues) < 0)
            return -1;
        if (!c->pkeys.present || !c->pvalues.present) {
            PyErr_SetString(PyExc_ValueError, "properties: names and values are required");
            return -1;
        }
    }
    if (replay != Py_None) {
        if (!PyTuple_Check(replay) || PyTuple_GET_SIZE(replay) != 2) {
            PyErr_SetString(PyExc_TypeError, "replay: (validity, int64 values)");
            return -1;
        }
        if (PyTuple_GET_ITEM(replay, 0) != Py_None) {
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(replay, 0), &c->replay_valid, PyBUF_SIMPLE) < 0)
                return -1;
            c->has_replay_valid = 1;
            if (c->replay_valid.len < (n + 7) / 8) {
                PyErr_SetString(PyExc_ValueError, "replay: validity bitmap too short");
                return -1;
            }
        }
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(replay, 1), &c->replay_data, PyBUF_SIMPLE) < 0)
            return -1;
        c->has_replay = 1;
        if (c->replay_data.len < 8 * n) {
            PyErr_SetString(PyExc_ValueError, "replay: too few values");
            return -1;
        }
        c->replay = (const int64_t *)c->replay_data.buf;
    }
    return 0;
}

/* What one row holds, measured before it is written: its body, tag and key, its entries
 * of the properties map, and the length of its property string. */
typedef struct {
    const unsigned char *b, *t, *k;
    Py_ssize_t blen, tlen, klen, first, last, plen, replay_len;
    int has_tag, has_key, add_uniq;
    char replay_text[24];
} element_t;

static const char REPLAY_NAME[] = "REPLAY_ID";
static const char UNIQ_NAME[] = "UNIQ_KEY";
#define UNIQ_ROW_DIGITS 12 /* the row number's hex digits after the write's prefix */
#define BATCH_HEAD 20      /* totalSize, magic, bodyCRC, flag, bodyLength */

/* Measure row ``i``: 0, or 1 when the row needs Message's checks (which say what is wrong):
 * a separator in a tag, key or property, an empty or null property name, a name twice, a
 * name in ``reserved`` (a tuple of bytes, or NULL), or a property string over the limit.
 * ``uniq_len`` >= 0: a UNIQ_KEY of the prefix and UNIQ_ROW_DIGITS follows the user's
 * properties unless they name one; < 0: none. */
static int element_measure(const rowcols_t *c, Py_ssize_t i, Py_ssize_t uniq_len,
                           PyObject *reserved, element_t *e)
{
    memset(e, 0, sizeof(*e));
    if (!strcol_value(&c->body, i, &e->b, &e->blen)) {
        e->b = (const unsigned char *)"";
        e->blen = 0; /* a null body is stored empty */
    }
    e->has_tag = strcol_value(&c->tags, i, &e->t, &e->tlen);
    e->has_key = strcol_value(&c->keys, i, &e->k, &e->klen);
    if ((e->has_tag && has_separator(e->t, e->tlen)) ||
        (e->has_key && has_separator(e->k, e->klen)))
        return 1;
    int replay_named = 0, uniq_named = 0;
    Py_ssize_t nreserved = reserved ? PyTuple_GET_SIZE(reserved) : 0;
    if (c->has_map && !(c->has_map_valid && !bit_set(&c->map_valid, i))) {
        e->first = c->moff[i];
        e->last = c->moff[i + 1];
    }
    for (Py_ssize_t x = e->first; x < e->last; x++) {
        const unsigned char *name, *value;
        Py_ssize_t name_len, value_len;
        if (!strcol_value(&c->pkeys, x, &name, &name_len) ||
            !strcol_value(&c->pvalues, x, &value, &value_len) || name_len == 0 ||
            has_separator(name, name_len) || has_separator(value, value_len))
            return 1;
        for (Py_ssize_t r = 0; r < nreserved; r++) {
            PyObject *rn = PyTuple_GET_ITEM(reserved, r);
            if (PyBytes_GET_SIZE(rn) == name_len &&
                memcmp(PyBytes_AS_STRING(rn), name, (size_t)name_len) == 0)
                return 1;
        }
        for (Py_ssize_t o = e->first; o < x; o++) { /* a name twice: dict semantics */
            const unsigned char *other;
            Py_ssize_t other_len;
            strcol_value(&c->pkeys, o, &other, &other_len);
            if (other_len == name_len && memcmp(other, name, (size_t)name_len) == 0)
                return 1;
        }
        if (name_len == sizeof(REPLAY_NAME) - 1 && memcmp(name, REPLAY_NAME, (size_t)name_len) == 0)
            replay_named = 1;
        if (name_len == sizeof(UNIQ_NAME) - 1 && memcmp(name, UNIQ_NAME, (size_t)name_len) == 0)
            uniq_named = 1;
        e->plen += name_len + value_len + 2;
    }
    if (c->replay && !replay_named && !(c->has_replay_valid && !bit_set(&c->replay_valid, i))) {
        e->replay_len = PyOS_snprintf(e->replay_text, sizeof(e->replay_text), "%lld",
                                      (long long)c->replay[i]);
        e->plen += (Py_ssize_t)sizeof(REPLAY_NAME) - 1 + e->replay_len + 2;
    }
    e->add_uniq = uniq_len >= 0 && !uniq_named;
    if (e->add_uniq)
        e->plen += (Py_ssize_t)sizeof(UNIQ_NAME) - 1 + uniq_len + UNIQ_ROW_DIGITS + 2;
    if (e->has_tag && e->tlen)
        e->plen += 4 + e->tlen + 2;
    if (e->has_key && e->klen)
        e->plen += 4 + e->klen + 2;
    return e->plen > MAX_PROPERTIES_SIZE;
}

static unsigned char *put_pair(unsigned char *w, const void *name, Py_ssize_t name_len,
                               const void *value, Py_ssize_t value_len)
{
    memcpy(w, name, (size_t)name_len);
    w += name_len;
    *w++ = 1;
    memcpy(w, value, (size_t)value_len);
    w += value_len;
    *w++ = 2;
    return w;
}

/* Write row ``i``'s property string (measured into ``e``: e->plen bytes) at ``w``, in
 * message_trailer's order: the user's properties, REPLAY_ID, UNIQ_KEY (``uniq`` and the hex
 * of ``row``, when e->add_uniq), TAGS, KEYS; the end. */
static unsigned char *properties_write(const rowcols_t *c, const element_t *e, unsigned char *w,
                                       const char *uniq, Py_ssize_t uniq_len, long long row)
{
    for (Py_ssize_t x = e->first; x < e->last; x++) {
        const unsigned char *name, *value;
        Py_ssize_t name_len, value_len;
        strcol_value(&c->pkeys, x, &name, &name_len);
        strcol_value(&c->pvalues, x, &value, &value_len);
        w = put_pair(w, name, name_len, value, value_len);
    }
    if (e->replay_len)
        w = put_pair(w, REPLAY_NAME, sizeof(REPLAY_NAME) - 1, e->replay_text, e->replay_len);
    if (e->add_uniq) {
        static const char hex[] = "0123456789ABCDEF";
        memcpy(w, UNIQ_NAME, sizeof(UNIQ_NAME) - 1);
        w += sizeof(UNIQ_NAME) - 1;
        *w++ = 1;
        memcpy(w, uniq, (size_t)uniq_len);
        w += uniq_len;
        unsigned long long r = (unsigned long long)row;
        for (int d = UNIQ_ROW_DIGITS - 1; d >= 0; d--) {
            w[d] = (unsigned char)hex[r & 15];
            r >>= 4;
        }
        w += UNIQ_ROW_DIGITS;
        *w++ = 2;
    }
    if (e->has_tag && e->tlen)
        w = put_pair(w, "TAGS", 4, e->t, e->tlen);
    if (e->has_key && e->klen)
        w = put_pair(w, "KEYS", 4, e->k, e->klen);
    return w;
}

PyDoc_STRVAR(arrow_prepare_doc,
"arrow_prepare(n, body, tags, keys, properties, replay, topic_head, born_timestamp, crc32,\n"
"              reserved) -> list | None\n\n"
"codec.prepare's tuples for ``n`` rows of Arrow columns, or None when a row needs the\n"
"checks of Message (see mqcore.contrib.spark.writing.py_arrow_prepare, the reference).");

static PyObject *speedups_arrow_prepare(PyObject *self, PyObject *args)
{
    Py_ssize_t n;
    PyObject *body_obj, *tags_obj, *keys_obj, *props_obj, *replay_obj, *born, *crc32, *reserved;
    const char *head;
    Py_ssize_t head_len;
    if (!PyArg_ParseTuple(args, "nOOOOOy#OOO!:arrow_prepare", &n, &body_obj, &tags_obj,
                          &keys_obj, &props_obj, &replay_obj, &head, &head_len, &born, &crc32,
                          &PyTuple_Type, &reserved))
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "arrow_prepare: n must be >= 0");
        return NULL;
    }
    rowcols_t c;
    PyObject *out = NULL, *zero = NULL, *result = NULL;
    if (rowcols_get(&c, n, body_obj, tags_obj, keys_obj, props_obj, replay_obj) < 0)
        goto done;
    Py_ssize_t nreserved = PyTuple_GET_SIZE(reserved);
    for (Py_ssize_t r = 0; r < nreserved; r++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(reserved, r))) {
            PyErr_SetString(PyExc_TypeError, "arrow_prepare: reserved names are bytes");
            goto done;
        }
    zero = PyLong_FromLong(0);
    out = PyList_New(n);
    if (zero == NULL || out == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        element_t e;
        if (element_measure(&c, i, -1, reserved, &e))
            goto slow;
        PyObject *trailer = PyBytes_FromStringAndSize(NULL, head_len + 2 + e.plen);
        if (trailer == NULL)
            goto done;
        unsigned char *w = BYTES(trailer);
        memcpy(w, head, (size_t)head_len);
        w += head_len;
        *w++ = (unsigned char)(e.plen >> 8);
        *w++ = (unsigned char)e.plen;
        properties_write(&c, &e, w, NULL, 0, 0);
        PyObject *body_bytes = PyBytes_FromStringAndSize((const char *)e.b, e.blen);
        PyObject *crc = body_bytes ? PyObject_CallOneArg(crc32, body_bytes) : NULL;
        unsigned long crc_value = crc ? PyLong_AsUnsignedLongMask(crc) : 0;
        Py_XDECREF(crc);
        PyObject *keys_str = NULL;
        if (crc != NULL && !(crc_value == (unsigned long)-1 && PyErr_Occurred())) {
            keys_str = e.has_key ? PyUnicode_DecodeUTF8((const char *)e.k, e.klen, "strict")
                                 : Py_NewRef(Py_None);
        }
        PyObject *item = keys_str ? PyTuple_New(P_FIELDS) : NULL;
        PyObject *size = item ? PyLong_FromSsize_t(HEADER_SIZE + e.blen + head_len + 2 + e.plen)
                              : NULL;
        PyObject *crc_obj = size ? PyLong_FromUnsignedLong(crc_value & 0x7FFFFFFFUL) : NULL;
        PyObject *code = crc_obj ? PyLong_FromLong(e.has_tag && e.tlen ? java_hash(e.t, e.tlen)
                                                                       : 0)
                                 : NULL;
        if (code == NULL) {
            Py_XDECREF(body_bytes);
            Py_DECREF(trailer);
            Py_XDECREF(keys_str);
            Py_XDECREF(item);
            Py_XDECREF(size);
            Py_XDECREF(crc_obj);
            goto done;
        }
        fill_prepared(item, size, body_bytes, trailer, crc_obj, Py_NewRef(zero), Py_NewRef(zero),
                      Py_NewRef(born), Py_NewRef(zero), Py_NewRef(zero), code, keys_str);
        /* Bytes, ints, a str and None: the tuple cannot be part of a cycle, so the garbage
         * collector need not track it (CPython untracks such tuples itself, later). Tracked,
         * a batch of them makes the collector walk them again and again. */
        PyObject_GC_UnTrack(item);
        PyList_SET_ITEM(out, i, item);
    }
    result = Py_NewRef(out);
    goto done;
slow:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(out);
    Py_XDECREF(zero);
    rowcols_release(&c);
    return result;
}

/* --- SEND_BATCH_MESSAGE bodies straight from Arrow columns (mqcore.contrib.spark.netbatch) */

static unsigned char *put_word(unsigned char *w, uint32_t v)
{
    put_be32(w, v);
    return w + 4;
}

/* Write row ``row``'s batch element (measured into ``e``) at ``w``; the end. */
static unsigned char *element_write(const rowcols_t *c, const element_t *e, unsigned char *w,
                                    const char *uniq, Py_ssize_t uniq_len, long long row)
{
    Py_ssize_t size = BATCH_HEAD + e->blen + 2 + e->plen;
    w = put_word(w, (uint32_t)size);
    w = put_word(w, 0); /* magic */
    w = put_word(w, 0); /* body CRC: the broker computes it */
    w = put_word(w, 0); /* flag */
    w = put_word(w, (uint32_t)e->blen);
    memcpy(w, e->b, (size_t)e->blen);
    w += e->blen;
    *w++ = (unsigned char)(e->plen >> 8);
    *w++ = (unsigned char)e->plen;
    return properties_write(c, e, w, uniq, uniq_len, row);
}

PyDoc_STRVAR(arrow_batches_doc,
"arrow_batches(n, body, tags, keys, properties, replay, rows, uniq_prefix, first_row,\n"
"              max_count, max_bytes) -> list[(bytes, int)] | None\n\n"
"SEND_BATCH_MESSAGE bodies for the rows ``rows`` (int64 indices) of ``n`` rows of Arrow\n"
"columns, cut at ``max_count`` messages or ``max_bytes``; None when a row needs the checks\n"
"of Message (see mqcore.contrib.spark.netbatch.py_arrow_batches, the reference).");

static PyObject *speedups_arrow_batches(PyObject *self, PyObject *args)
{
    Py_ssize_t n, max_count, max_bytes, uniq_len;
    long long first_row;
    PyObject *body, *tags, *keys, *props, *replay, *rows_obj;
    const char *uniq;
    if (!PyArg_ParseTuple(args, "nOOOOOOy#Lnn:arrow_batches", &n, &body, &tags, &keys, &props,
                          &replay, &rows_obj, &uniq, &uniq_len, &first_row, &max_count,
                          &max_bytes))
        return NULL;
    if (n < 0 || max_count < 1 || max_bytes < 1) {
        PyErr_SetString(PyExc_ValueError, "arrow_batches: n >= 0, max_count and max_bytes >= 1");
        return NULL;
    }
    rowcols_t c;
    Py_buffer rows_buf;
    int has_rows = 0;
    element_t *elements = NULL;
    PyObject *out = NULL, *result = NULL;
    if (rowcols_get(&c, n, body, tags, keys, props, replay) < 0)
        goto done;
    if (PyObject_GetBuffer(rows_obj, &rows_buf, PyBUF_SIMPLE) < 0)
        goto done;
    has_rows = 1;
    Py_ssize_t count = rows_buf.len / 8;
    const int64_t *rows = (const int64_t *)rows_buf.buf;
    for (Py_ssize_t j = 0; j < count; j++)
        if (rows[j] < 0 || rows[j] >= n) {
            PyErr_Format(PyExc_ValueError, "arrow_batches: row %lld of %zd rows",
                         (long long)rows[j], n);
            goto done;
        }
    elements = PyMem_Malloc(sizeof(element_t) * (size_t)(count ? count : 1));
    if (elements == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < count; j++)
        if (element_measure(&c, (Py_ssize_t)rows[j], uniq_len, NULL, &elements[j]))
            goto slow;
    out = PyList_New(0);
    if (out == NULL)
        goto done;
    for (Py_ssize_t j = 0; j < count;) {
        /* One body: at least one element, then while both limits hold. */
        Py_ssize_t stop = j, bytes = 0;
        while (stop < count && stop - j < max_count) {
            Py_ssize_t size = BATCH_HEAD + elements[stop].blen + 2 + elements[stop].plen;
            if (stop > j && bytes + size > max_bytes)
                break;
            bytes += size;
            stop++;
        }
        PyObject *data = PyBytes_FromStringAndSize(NULL, bytes);
        if (data == NULL)
            goto done;
        unsigned char *w = BYTES(data);
        for (Py_ssize_t x = j; x < stop; x++)
            w = element_write(&c, &elements[x], w, uniq, uniq_len, first_row + rows[x]);
        PyObject *item = Py_BuildValue("(Nn)", data, stop - j);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            goto done;
        }
        Py_DECREF(item);
        j = stop;
    }
    result = Py_NewRef(out);
    goto done;
slow:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(out);
    PyMem_Free(elements);
    if (has_rows)
        PyBuffer_Release(&rows_buf);
    rowcols_release(&c);
    return result;
}

static PyMethodDef methods[] = {
    {"record_columns", speedups_record_columns, METH_VARARGS, record_columns_doc},
    {"arrow_prepare", speedups_arrow_prepare, METH_VARARGS, arrow_prepare_doc},
    {"arrow_batches", speedups_arrow_batches, METH_VARARGS, arrow_batches_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "mqcore.contrib.spark._arrow",
    "C versions of the Spark source's column builder and the sink's record builder.",
    -1,
    methods,
};

PyMODINIT_FUNC PyInit__arrow(void)
{
    return PyModule_Create(&module);
}
