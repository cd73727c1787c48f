/*
 * mqcore._speedups: the per-message loops of a batch put, in C.
 *
 * A store put of 32 messages spent most of its Python time in three loops that each touch
 * every message: stamping the record headers (codec.pack), laying out the consume-queue
 * units and offsets (mqcore.batch.units), and building the PutResult tuples with their
 * message ids (mqcore.batch.put_results). This module runs the same loops in C. It is
 * optional: mqcore.codec and mqcore.batch hold the reference implementations in Python,
 * use this module when it was built, and the test suite checks that both produce the
 * same bytes and values.
 *
 * Every function takes the plain tuples codec.prepare() returns (laid out as
 * codec.Prepared: size, body, trailer, crc, flag, sys_flag, born_timestamp,
 * reconsume_times, prepared_offset, tags_code, keys) and validates what it reads, so a
 * malformed item raises instead of writing out of bounds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <limits.h>
#include <stdarg.h>
#include <string.h>
#include <structmember.h>

/* Field positions in a prepared item. */
#define P_SIZE 0
#define P_BODY 1
#define P_TRAILER 2
#define P_CRC 3
#define P_FLAG 4
#define P_TAGS_CODE 9
#define P_FIELDS 11

/* Fill a fresh P_FIELDS tuple as a Prepared record (mqcore.codec.Prepared's layout: size,
 * body, trailer, masked CRC, flag, sys flag, born timestamp, reconsume times, prepared
 * transaction offset, tags code, keys). Steals every reference. */
static void
fill_prepared(PyObject *item, PyObject *size, PyObject *body, PyObject *trailer, PyObject *crc,
              PyObject *flag, PyObject *sflag, PyObject *born, PyObject *recon, PyObject *prep,
              PyObject *code, PyObject *keys)
{
    PyTuple_SET_ITEM(item, P_SIZE, size);
    PyTuple_SET_ITEM(item, P_BODY, body);
    PyTuple_SET_ITEM(item, P_TRAILER, trailer);
    PyTuple_SET_ITEM(item, P_CRC, crc);
    PyTuple_SET_ITEM(item, P_FLAG, flag);
    PyTuple_SET_ITEM(item, 5, sflag);
    PyTuple_SET_ITEM(item, 6, born);
    PyTuple_SET_ITEM(item, 7, recon);
    PyTuple_SET_ITEM(item, 8, prep);
    PyTuple_SET_ITEM(item, P_TAGS_CODE, code);
    PyTuple_SET_ITEM(item, 10, keys);
}

/* Record header: everything before the body, including the body length (codec.py). */
#define HEADER_SIZE 88
#define MIDDLE_SIZE 48
#define UNIT_SIZE 20

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void put_be64(unsigned char *p, uint64_t v)
{
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

/* Every int these loops read must be an int object: converting anything else would call
 * its __index__, Python code that could change the lists being read. */
static int check_int(PyObject *obj, const char *what)
{
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    return 0;
}

static int as_int64(PyObject *obj, const char *what, int64_t *out)
{
    if (check_int(obj, what) < 0)
        return -1;
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = (int64_t)v;
    return 0;
}

/* A Python int that must fit a signed 32-bit field (as struct's "i" requires). */
static int as_int32(PyObject *obj, const char *what, int32_t *out)
{
    int64_t v;
    if (as_int64(obj, what, &v) < 0)
        return -1;
    if (v < INT32_MIN || v > INT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "%s %lld does not fit a signed 32-bit field", what,
                     (long long)v);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

/* Item ``i`` of a prepared list (borrowed), checked to be a tuple in Prepared's layout. */
static PyObject *prepared_item(PyObject *prepared, Py_ssize_t i)
{
    if (i >= PyList_GET_SIZE(prepared)) {
        PyErr_SetString(PyExc_RuntimeError, "the prepared list changed size during the call");
        return NULL;
    }
    PyObject *item = PyList_GET_ITEM(prepared, i);
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != P_FIELDS) {
        PyErr_Format(PyExc_TypeError,
                     "prepared item %zd is not a %d-field tuple from codec.prepare()", i,
                     P_FIELDS);
        return NULL;
    }
    return item;
}

/* The record size of a prepared item, checked against its body and trailer. */
static int item_size(PyObject *item, Py_ssize_t i, int32_t *size)
{
    PyObject *body = PyTuple_GET_ITEM(item, P_BODY);
    PyObject *trailer = PyTuple_GET_ITEM(item, P_TRAILER);
    if (!PyBytes_Check(body) || !PyBytes_Check(trailer)) {
        PyErr_Format(PyExc_TypeError, "prepared item %zd: body and trailer must be bytes", i);
        return -1;
    }
    if (as_int32(PyTuple_GET_ITEM(item, P_SIZE), "record size", size) < 0)
        return -1;
    if ((Py_ssize_t)*size != HEADER_SIZE + PyBytes_GET_SIZE(body) + PyBytes_GET_SIZE(trailer)) {
        PyErr_Format(PyExc_ValueError,
                     "prepared item %zd: record size %d does not match its body and trailer", i,
                     (int)*size);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(pack_doc,
"pack(prepared, queue_id, queue_offset, commitlog_offset, store_timestamp, store_ip,\n"
"     store_port, born_ip, born_port, magic) -> bytes\n\n"
"The records of ``prepared`` back to back, as codec.py_pack_records writes them. The sys\n"
"flag, born timestamp, reconsume times and prepared offset come from the first item (one\n"
"prepare() call shares them); hosts are 4 address bytes and a port.");

static PyObject *speedups_pack(PyObject *self, PyObject *args)
{
    PyObject *prepared;
    int32_t queue_id, magic, store_port, born_port;
    long long queue_offset, phys, store_ts;
    const char *store_ip, *born_ip;
    Py_ssize_t store_ip_len, born_ip_len;
    if (!PyArg_ParseTuple(args, "O!iLLLy#iy#ii:pack", &PyList_Type, &prepared, &queue_id,
                          &queue_offset, &phys, &store_ts, &store_ip, &store_ip_len,
                          &store_port, &born_ip, &born_ip_len, &born_port, &magic))
        return NULL;
    if (store_ip_len != 4 || born_ip_len != 4) {
        PyErr_SetString(PyExc_ValueError, "pack: host addresses must be 4 bytes (IPv4)");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(prepared);
    if (n == 0)
        return PyBytes_FromStringAndSize(NULL, 0);
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = prepared_item(prepared, i);
        int32_t size;
        if (item == NULL || item_size(item, i, &size) < 0)
            return NULL;
        total += size;
    }
    /* The 48 bytes every header of the batch shares, from the first item. */
    unsigned char middle[MIDDLE_SIZE];
    PyObject *first = PyList_GET_ITEM(prepared, 0);
    int32_t sflag, recon;
    int64_t born, ptx;
    if (as_int32(PyTuple_GET_ITEM(first, 5), "sys flag", &sflag) < 0 ||
        as_int64(PyTuple_GET_ITEM(first, 6), "born timestamp", &born) < 0 ||
        as_int32(PyTuple_GET_ITEM(first, 7), "reconsume times", &recon) < 0 ||
        as_int64(PyTuple_GET_ITEM(first, 8), "prepared offset", &ptx) < 0)
        return NULL;
    put_be32(middle, (uint32_t)sflag);
    put_be64(middle + 4, (uint64_t)born);
    memcpy(middle + 12, born_ip, 4);
    put_be32(middle + 16, (uint32_t)born_port);
    put_be64(middle + 20, (uint64_t)store_ts);
    memcpy(middle + 28, store_ip, 4);
    put_be32(middle + 32, (uint32_t)store_port);
    put_be32(middle + 36, (uint32_t)recon);
    put_be64(middle + 40, (uint64_t)ptx);
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    unsigned char *end = p + total;
    for (Py_ssize_t i = 0; i < n; i++) {
        /* No Python code runs and nothing is allocated in this loop, so the items are the
         * ones measured above; the bounds check below is a second line of defence. */
        PyObject *item = PyList_GET_ITEM(prepared, i);
        PyObject *body = PyTuple_GET_ITEM(item, P_BODY);
        PyObject *trailer = PyTuple_GET_ITEM(item, P_TRAILER);
        int32_t size, crc, flag;
        if (as_int32(PyTuple_GET_ITEM(item, P_SIZE), "record size", &size) < 0 ||
            as_int32(PyTuple_GET_ITEM(item, P_CRC), "body CRC", &crc) < 0 ||
            as_int32(PyTuple_GET_ITEM(item, P_FLAG), "flag", &flag) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        Py_ssize_t body_len = PyBytes_GET_SIZE(body);
        Py_ssize_t trailer_len = PyBytes_GET_SIZE(trailer);
        if (HEADER_SIZE + body_len + trailer_len != size || size > end - p) {
            PyErr_SetString(PyExc_RuntimeError, "prepared items changed during pack()");
            Py_DECREF(out);
            return NULL;
        }
        put_be32(p, (uint32_t)size);
        put_be32(p + 4, (uint32_t)magic);
        put_be32(p + 8, (uint32_t)crc);
        put_be32(p + 12, (uint32_t)queue_id);
        put_be32(p + 16, (uint32_t)flag);
        put_be64(p + 20, (uint64_t)(queue_offset + i));
        put_be64(p + 28, (uint64_t)phys);
        memcpy(p + 36, middle, MIDDLE_SIZE);
        put_be32(p + 84, (uint32_t)body_len);
        memcpy(p + HEADER_SIZE, PyBytes_AS_STRING(body), (size_t)body_len);
        memcpy(p + HEADER_SIZE + body_len, PyBytes_AS_STRING(trailer), (size_t)trailer_len);
        p += size;
        phys += size;
    }
    return out;
}

PyDoc_STRVAR(units_doc,
"units(prepared, start) -> (units, offsets, end)\n\n"
"Records of ``prepared`` laid back to back from commit-log offset ``start``: their\n"
"20-byte consume-queue units (offset, size, tags code; big-endian) as one bytes object,\n"
"the offset of each record, and the offset just past the last.");

static PyObject *speedups_units(PyObject *self, PyObject *args)
{
    PyObject *prepared;
    long long start;
    if (!PyArg_ParseTuple(args, "O!L:units", &PyList_Type, &prepared, &start))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(prepared);
    PyObject *units = PyBytes_FromStringAndSize(NULL, n * UNIT_SIZE);
    PyObject *offsets = PyList_New(n);
    if (units == NULL || offsets == NULL)
        goto fail;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(units);
    long long at = start;
    for (Py_ssize_t i = 0; i < n; i++, p += UNIT_SIZE) {
        PyObject *item = prepared_item(prepared, i);
        int32_t size;
        int64_t code;
        if (item == NULL || as_int32(PyTuple_GET_ITEM(item, P_SIZE), "record size", &size) < 0 ||
            as_int64(PyTuple_GET_ITEM(item, P_TAGS_CODE), "tags code", &code) < 0)
            goto fail;
        PyObject *off = PyLong_FromLongLong(at);
        if (off == NULL)
            goto fail;
        PyList_SET_ITEM(offsets, i, off);
        put_be64(p, (uint64_t)at);
        put_be32(p + 8, (uint32_t)size);
        put_be64(p + 12, (uint64_t)code);
        at += size;
    }
    return Py_BuildValue("NNL", units, offsets, at);
fail:
    Py_XDECREF(units);
    Py_XDECREF(offsets);
    return NULL;
}

/* An empty 5-tuple of type ``cls`` to fill (a plain tuple from 3.14 on, see below). */
static PyObject *new_result(PyTypeObject *cls)
{
#if PY_VERSION_HEX >= 0x030E0000
    return PyTuple_New(5);
#else
    return cls->tp_alloc(cls, 5);
#endif
}

PyDoc_STRVAR(put_results_doc,
"put_results(cls, prefix, prepared, offsets, queue_offset, store_timestamp) -> list\n\n"
"``cls((prefix + 16 upper-case hex digits of the offset, queue_offset + i, offset,\n"
"store_timestamp, size))`` for each record; ``cls`` is a tuple subclass (PutResult).");

static PyObject *speedups_put_results(PyObject *self, PyObject *args)
{
    PyTypeObject *cls;
    PyObject *prefix, *prepared, *offsets, *ts;
    long long queue_offset;
    static const char hex[] = "0123456789ABCDEF";
    if (!PyArg_ParseTuple(args, "O!UO!O!LO:put_results", &PyType_Type, &cls, &prefix,
                          &PyList_Type, &prepared, &PyList_Type, &offsets, &queue_offset, &ts))
        return NULL;
    if (!PyType_IsSubtype(cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "put_results: cls must be a tuple subclass");
        return NULL;
    }
    if (!PyUnicode_IS_ASCII(prefix)) {
        PyErr_SetString(PyExc_ValueError, "put_results: the message id prefix must be ASCII");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(prepared);
    if (PyList_GET_SIZE(offsets) != n) {
        PyErr_Format(PyExc_ValueError, "put_results: %zd offsets for %zd records",
                     PyList_GET_SIZE(offsets), n);
        return NULL;
    }
    Py_ssize_t plen = PyUnicode_GET_LENGTH(prefix);
    const char *pchars = (const char *)PyUnicode_DATA(prefix);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = prepared_item(prepared, i);
        if (item == NULL)
            goto fail;
        if (i >= PyList_GET_SIZE(offsets)) {
            PyErr_SetString(PyExc_RuntimeError, "the offsets list changed size during the call");
            goto fail;
        }
        PyObject *off = PyList_GET_ITEM(offsets, i);
        int64_t at;
        if (as_int64(off, "commit-log offset", &at) < 0)
            goto fail;
        /* Owned from here: the allocations below may run the garbage collector. */
        PyObject *size = Py_NewRef(PyTuple_GET_ITEM(item, P_SIZE));
        Py_INCREF(off);
        PyObject *msg_id = PyUnicode_New(plen + 16, 127);
        if (msg_id == NULL) {
            Py_DECREF(size);
            Py_DECREF(off);
            goto fail;
        }
        char *c = (char *)PyUnicode_DATA(msg_id);
        memcpy(c, pchars, (size_t)plen);
        uint64_t u = (uint64_t)at;
        for (int k = 15; k >= 0; k--, u >>= 4)
            c[plen + k] = hex[u & 0xF];
        PyObject *qoff = PyLong_FromLongLong(queue_offset + i);
        PyObject *result = qoff ? new_result(cls) : NULL;
        if (result == NULL) {
            Py_DECREF(msg_id);
            Py_XDECREF(qoff);
            Py_DECREF(size);
            Py_DECREF(off);
            goto fail;
        }
        Py_INCREF(ts);
        PyTuple_SET_ITEM(result, 0, msg_id);
        PyTuple_SET_ITEM(result, 1, qoff);
        PyTuple_SET_ITEM(result, 2, off);
        PyTuple_SET_ITEM(result, 3, ts);
        PyTuple_SET_ITEM(result, 4, size);
#if PY_VERSION_HEX >= 0x030E0000
        /* Tuples cache their hash from 3.14 on: build through tuple.__new__, which sets
         * the cache up, rather than filling a raw allocation. */
        PyObject *args1 = PyTuple_Pack(1, result);
        Py_DECREF(result);
        result = args1 ? PyTuple_Type.tp_new(cls, args1, NULL) : NULL;
        Py_XDECREF(args1);
        if (result == NULL)
            goto fail;
#endif
        PyList_SET_ITEM(out, i, result);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}


/* Interned attribute names of mqcore.Message, created at import. */
static PyObject *s_body, *s_properties, *s_tags, *s_keys, *s_topic, *s_delay_level, *s_flag;

/* --- the trailer of a message with properties (codec.message_trailer) ------------------ */

static int32_t java_hash(const unsigned char *s, Py_ssize_t n);

#define MAX_TOPIC 127          /* codec.MAX_TOPIC_LENGTH */
#define MAX_PROPERTY_TEXT 32767 /* codec.MAX_PROPERTIES_SIZE */
#define FAST_PROPERTIES 16     /* more than this: the Python code encodes them */
#define MAX_CODE_DIGITS 18     /* a deliver time of up to 18 digits fits a signed 64-bit code */

/* UTF-8 of an exact str (borrowed, cached in the object), or NULL without an error set when
 * it is not an exact str or cannot be encoded (a lone surrogate): the Python code then
 * encodes it, and raises what it raises. */
static const char *utf8_of(PyObject *obj, Py_ssize_t *len)
{
    if (!PyUnicode_CheckExact(obj))
        return NULL;
    const char *s = PyUnicode_AsUTF8AndSize(obj, len);
    if (s == NULL)
        PyErr_Clear();
    return s;
}

/* ``text`` as a timer deliver time (1..18 ASCII digits), or -1. */
static long long deliver_digits(const char *text, Py_ssize_t n)
{
    if (n < 1 || n > MAX_CODE_DIGITS)
        return -1;
    long long v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (text[i] < '0' || text[i] > '9')
            return -1;
        v = v * 10 + (text[i] - '0');
    }
    return v;
}

/* Write the property text of a record trailer at p: ``name\x01value\x02`` for each of the
 * ntext / 2 pairs in text and lens, then TAGS, KEYS and DELAY, each when its length is not 0.
 * Returns where the text ends. */
static char *put_property_text(char *p, const char *const *text, const Py_ssize_t *lens,
                               Py_ssize_t ntext, const char *tags_s, Py_ssize_t tags_len,
                               const char *keys_s, Py_ssize_t keys_len, const char *delay_s,
                               Py_ssize_t delay_len)
{
    for (Py_ssize_t i = 0; i < ntext; i++) {
        memcpy(p, text[i], (size_t)lens[i]);
        p += lens[i];
        *p++ = (i & 1) ? '\x02' : '\x01';
    }
    if (tags_len) {
        memcpy(p, "TAGS\x01", 5);
        memcpy(p + 5, tags_s, (size_t)tags_len);
        p += 5 + tags_len;
        *p++ = '\x02';
    }
    if (keys_len) {
        memcpy(p, "KEYS\x01", 5);
        memcpy(p + 5, keys_s, (size_t)keys_len);
        p += 5 + keys_len;
        *p++ = '\x02';
    }
    if (delay_len) {
        memcpy(p, "DELAY\x01", 6);
        memcpy(p + 6, delay_s, (size_t)delay_len);
        p += 6 + delay_len;
        *p++ = '\x02';
    }
    return p;
}

/* codec.message_trailer's result for a message that has properties, tags, keys or a delay
 * level, built in C: 1 with ``*trailer`` and ``*code`` set (new references), 0 when the
 * Python code must build it (a field that is not an exact str, dict or int, text that does
 * not encode as UTF-8, a topic or property string beyond the record format's limits, more
 * than FAST_PROPERTIES properties: it raises or encodes as it always did), -1 on error.
 *
 * The property string is ``name\x01value\x02`` per property in the dict's order, then TAGS,
 * KEYS and DELAY when set; the tags code is Java's hashCode of the tag (0 without one). In
 * the topic ``code_topic``, a ``code_name`` property of 1..18 ASCII digits (the timer topic's
 * TIMER_OUT_MS) is the tags code instead, as codec.timer_tags_code says. */
static int fast_trailer(PyObject *m, PyObject *t, PyObject *code_topic, PyObject *code_name,
                        PyObject **trailer, PyObject **code)
{
    PyObject *props = NULL, *tags = NULL, *keys = NULL, *delay = NULL;
    PyObject *held[2 * FAST_PROPERTIES]; /* names and values, owned while they are read */
    const char *text[2 * FAST_PROPERTIES];
    Py_ssize_t lens[2 * FAST_PROPERTIES];
    Py_ssize_t nheld = 0;
    int result = 0;
    Py_ssize_t topic_len, tags_len = 0, keys_len = 0, name_len = 0, code_topic_len = 0;
    const char *topic_s = utf8_of(t, &topic_len);
    const char *tags_s = NULL, *keys_s = NULL, *name_s = NULL, *code_topic_s = NULL;
    char delay_s[24];
    int delay_len = 0;
    if (topic_s == NULL || topic_len < 1 || topic_len > MAX_TOPIC)
        return 0;
    if ((props = PyObject_GetAttr(m, s_properties)) == NULL ||
        (tags = PyObject_GetAttr(m, s_tags)) == NULL ||
        (keys = PyObject_GetAttr(m, s_keys)) == NULL ||
        (delay = PyObject_GetAttr(m, s_delay_level)) == NULL) {
        result = -1;
        goto done;
    }
    if (!PyDict_CheckExact(props) || PyDict_GET_SIZE(props) > FAST_PROPERTIES ||
        !PyLong_CheckExact(delay))
        goto done;
    if (tags != Py_None && (tags_s = utf8_of(tags, &tags_len)) == NULL)
        goto done;
    if (keys != Py_None && (keys_s = utf8_of(keys, &keys_len)) == NULL)
        goto done;
    int overflow;
    long long level = PyLong_AsLongLongAndOverflow(delay, &overflow);
    if (overflow || (level == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        goto done;
    }
    if (level != 0)
        delay_len = snprintf(delay_s, sizeof delay_s, "%lld", level);
    if (code_name != NULL && code_topic != NULL) {
        code_topic_s = utf8_of(code_topic, &code_topic_len);
        name_s = utf8_of(code_name, &name_len);
        if (code_topic_s == NULL || name_s == NULL)
            goto done;
    }
    /* Every name and value is held (a reference of our own) before any is read: nothing
     * below runs Python code, but a held string cannot go away whatever happens. */
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(props, &pos, &k, &v)) {
        if (nheld + 2 > 2 * FAST_PROPERTIES)
            goto done;
        held[nheld++] = Py_NewRef(k);
        held[nheld++] = Py_NewRef(v);
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < nheld; i++) {
        if ((text[i] = utf8_of(held[i], &lens[i])) == NULL)
            goto done;
        total += lens[i] + 1; /* \x01 after a name, \x02 after a value */
    }
    if (tags_len)
        total += 5 + tags_len + 1;
    if (keys_len)
        total += 5 + keys_len + 1;
    if (delay_len)
        total += 6 + delay_len + 1;
    if (total > MAX_PROPERTY_TEXT)
        goto done;
    PyObject *out = PyBytes_FromStringAndSize(NULL, 1 + topic_len + 2 + total);
    if (out == NULL) {
        result = -1;
        goto done;
    }
    char *p = PyBytes_AS_STRING(out);
    *p++ = (char)topic_len;
    memcpy(p, topic_s, (size_t)topic_len);
    p += topic_len;
    *p++ = (char)(total >> 8);
    *p++ = (char)(total & 0xFF);
    p = put_property_text(p, text, lens, nheld, tags_s, tags_len, keys_s, keys_len, delay_s,
                          delay_len);
    assert(p == PyBytes_AS_STRING(out) + PyBytes_GET_SIZE(out));
    long long value = tags_len ? java_hash((const unsigned char *)tags_s, tags_len) : 0;
    if (name_s != NULL && topic_len == code_topic_len &&
        memcmp(topic_s, code_topic_s, (size_t)topic_len) == 0) {
        for (Py_ssize_t i = 0; i < nheld; i += 2) {
            if (lens[i] == name_len && memcmp(text[i], name_s, (size_t)name_len) == 0) {
                long long at = deliver_digits(text[i + 1], lens[i + 1]);
                if (at >= 0)
                    value = at;
                break;
            }
        }
    }
    *code = PyLong_FromLongLong(value);
    if (*code == NULL) {
        Py_DECREF(out);
        result = -1;
        goto done;
    }
    *trailer = out;
    result = 1;
done:
    for (Py_ssize_t i = 0; i < nheld; i++)
        Py_DECREF(held[i]);
    Py_XDECREF(props);
    Py_XDECREF(tags);
    Py_XDECREF(keys);
    Py_XDECREF(delay);
    return result;
}

PyDoc_STRVAR(prepare_doc,
"prepare(messages, born_timestamp, topic, reconsume_times, sys_flag, crc32, trailer,\n"
"        plain_trailers, code_topic=None, code_name=None) -> list\n\n"
"codec.prepare's loop: one Prepared-layout tuple per message. ``crc32(body)`` is the\n"
"checksum function; ``trailer(message, topic)`` returns ``(trailer bytes, tags code)``.\n"
"For messages without properties, tags, keys or delay level, the trailer is looked up in\n"
"the dict ``plain_trailers`` (topic -> bytes) first, which ``trailer`` fills. Other\n"
"messages' trailers are built in C where their fields allow (see fast_trailer), else by\n"
"``trailer``; in the topic ``code_topic`` a property ``code_name`` of 1..18 digits is the\n"
"tags code (codec.timer_tags_code).");

/* Truthiness of attribute ``name`` of ``m`` (-1 on error). */
static int attr_true(PyObject *m, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(m, name);
    if (v == NULL)
        return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

static PyObject *speedups_prepare(PyObject *self, PyObject *args)
{
    PyObject *messages, *born, *topic, *recon, *sflag, *crc32, *trailer_fn, *plain_cache;
    PyObject *code_topic = Py_None, *code_name = Py_None;
    if (!PyArg_ParseTuple(args, "OOOOOOOO!|OO:prepare", &messages, &born, &topic, &recon, &sflag,
                          &crc32, &trailer_fn, &PyDict_Type, &plain_cache, &code_topic,
                          &code_name))
        return NULL;
    if (code_topic == Py_None || code_name == Py_None)
        code_topic = code_name = NULL;
    /* A snapshot: the loop calls back into Python, where another thread could change a
     * list the caller still holds. */
    PyObject *seq = PySequence_Tuple(messages); /* "... is not iterable" if it is not */
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    PyObject *zero = PyLong_FromLong(0);
    PyObject *plain_topic = NULL, *plain_trailer = NULL; /* last topic without properties */
    PyObject *body = NULL, *keys = NULL, *t = NULL, *trailer = NULL, *code = NULL;
    if (out == NULL || zero == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = PyTuple_GET_ITEM(seq, i);
        body = PyObject_GetAttr(m, s_body);
        if (body == NULL)
            goto fail;
        if (!PyBytes_CheckExact(body)) {
            PyObject *b = PyBytes_FromObject(body);
            Py_SETREF(body, b);
            if (body == NULL)
                goto fail;
        }
        keys = PyObject_GetAttr(m, s_keys);
        if (keys == NULL)
            goto fail;
        if (topic != Py_None && PyObject_IsTrue(topic)) {
            t = Py_NewRef(topic);
        } else {
            t = PyObject_GetAttr(m, s_topic);
            if (t == NULL)
                goto fail;
        }
        int plain = PyObject_IsTrue(keys);
        if (plain == 0) {
            plain = attr_true(m, s_properties);
            if (plain == 0)
                plain = attr_true(m, s_tags);
            if (plain == 0)
                plain = attr_true(m, s_delay_level);
        }
        if (plain < 0)
            goto fail;
        plain = !plain;
        if (plain && plain_topic != NULL) {
            int same = PyObject_RichCompareBool(t, plain_topic, Py_EQ);
            if (same < 0)
                goto fail;
            if (same) {
                trailer = Py_NewRef(plain_trailer);
                code = Py_NewRef(zero);
            }
        }
        if (plain && trailer == NULL) {
            /* One message per put is common: the cache spares a call into Python. */
            PyObject *hit = PyDict_GetItemWithError(plain_cache, t); /* borrowed */
            if (hit == NULL && PyErr_Occurred())
                goto fail;
            if (hit != NULL && PyBytes_Check(hit)) {
                trailer = Py_NewRef(hit);
                code = Py_NewRef(zero);
                Py_XSETREF(plain_topic, Py_NewRef(t));
                Py_XSETREF(plain_trailer, Py_NewRef(trailer));
            }
        }
        if (trailer == NULL && !plain) {
            if (fast_trailer(m, t, code_topic, code_name, &trailer, &code) < 0)
                goto fail;
        }
        if (trailer == NULL) {
            PyObject *pair = PyObject_CallFunctionObjArgs(trailer_fn, m, t, NULL);
            if (pair == NULL)
                goto fail;
            if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
                !PyBytes_Check(PyTuple_GET_ITEM(pair, 0))) {
                Py_DECREF(pair);
                PyErr_SetString(PyExc_TypeError, "prepare: trailer() must return (bytes, int)");
                goto fail;
            }
            trailer = Py_NewRef(PyTuple_GET_ITEM(pair, 0));
            code = Py_NewRef(PyTuple_GET_ITEM(pair, 1));
            Py_DECREF(pair);
            if (plain) {
                Py_XSETREF(plain_topic, Py_NewRef(t));
                Py_XSETREF(plain_trailer, Py_NewRef(trailer));
            }
        }
        PyObject *crc_obj = PyObject_CallOneArg(crc32, body);
        if (crc_obj == NULL)
            goto fail;
        unsigned long crc = PyLong_AsUnsignedLongMask(crc_obj);
        Py_DECREF(crc_obj);
        if (crc == (unsigned long)-1 && PyErr_Occurred())
            goto fail;
        PyObject *flag = PyObject_GetAttr(m, s_flag);
        if (flag == NULL)
            goto fail;
        PyObject *item = PyTuple_New(P_FIELDS);
        PyObject *size = PyLong_FromSsize_t(HEADER_SIZE + PyBytes_GET_SIZE(body) +
                                            PyBytes_GET_SIZE(trailer));
        PyObject *crc_masked = PyLong_FromUnsignedLong(crc & 0x7FFFFFFFUL);
        if (item == NULL || size == NULL || crc_masked == NULL) {
            Py_XDECREF(item);
            Py_XDECREF(size);
            Py_XDECREF(crc_masked);
            Py_DECREF(flag);
            goto fail;
        }
        fill_prepared(item, size, body, trailer, crc_masked, flag, Py_NewRef(sflag),
                      Py_NewRef(born), Py_NewRef(recon), Py_NewRef(zero), code, keys);
        PyList_SET_ITEM(out, i, item);
        body = keys = trailer = code = NULL; /* owned by the tuple now */
        Py_CLEAR(t);
    }
    Py_DECREF(seq);
    Py_DECREF(zero);
    Py_XDECREF(plain_topic);
    Py_XDECREF(plain_trailer);
    return out;
fail:
    Py_XDECREF(body);
    Py_XDECREF(keys);
    Py_XDECREF(t);
    Py_XDECREF(trailer);
    Py_XDECREF(code);
    Py_XDECREF(plain_topic);
    Py_XDECREF(plain_trailer);
    Py_XDECREF(zero);
    Py_XDECREF(out);
    Py_DECREF(seq);
    return NULL;
}

/* --- Arrow columns of stored records (mqcore.contrib.spark.columns) ------------------- */

/* Header positions of a stored record (codec.py). */
#define R_QUEUE_ID 12
#define R_QUEUE_OFFSET 20
#define R_PHYS 28
#define R_SYS_FLAG 36
#define R_BORN_TS 40
#define R_STORE_TS 56
#define R_STORE_IP 64
#define R_STORE_PORT 68
#define R_RECONSUME 72
#define R_BODY_LEN 84
#define MIN_RECORD (HEADER_SIZE + 3) /* an empty body, topic and property string */
#define MESSAGE_MAGIC 0xDAA320A7u
#define V6_FLAGS 0x30
#define COMPRESSED_FLAG 0x1 /* sys flag bit 0: the body is zlib-compressed */

/* Columns, in the order of mqcore.contrib.spark.records.COLUMNS. */
enum {
    COL_TOPIC, COL_QUEUE_ID, COL_QUEUE_OFFSET, COL_COMMITLOG_OFFSET, COL_MSG_ID, COL_TAGS,
    COL_KEYS, COL_PROPERTIES, COL_BORN_TS, COL_STORE_TS, COL_RECONSUME, COL_BODY, NCOLS
};
#define WANTS(c) (wanted & (1L << (c)))
#define PROPERTY_COLS ((1L << COL_TAGS) | (1L << COL_KEYS) | (1L << COL_PROPERTIES))

static uint32_t get_be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t get_be64(const unsigned char *p)
{
    return ((uint64_t)get_be32(p) << 32) | get_be32(p + 4);
}

/* Whether ``s[0:n]`` is UTF-8 that Python's strict decoder accepts (no surrogates, no
 * overlong forms, nothing above U+10FFFF). */
static int utf8_ok(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ULL)) {
                i += 8;
                continue;
            }
        }
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0)
                lo = 0xA0;
            else if (c == 0xED)
                hi = 0x9F;
        }
        else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F;
        }
        else
            return 0;
        if (i + len > n || s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (int k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF)
                return 0;
        i += len;
    }
    return 1;
}

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
    if (avail < MIN_RECORD) {
        corrupt(error, offset, "truncated: %zd bytes left, a record takes at least %d", avail,
                MIN_RECORD);
        return -1;
    }
    int32_t size = (int32_t)get_be32(rec);
    if (usize != LLONG_MIN && size != usize) {
        corrupt(error, offset, "its header says %d bytes, its consume-queue unit %lld",
                (int)size, usize);
        return -1;
    }
    uint32_t magic = get_be32(rec + 4);
    if (magic != MESSAGE_MAGIC) {
        corrupt(error, offset, "bad magic code 0x%08X", (unsigned int)magic);
        return -1;
    }
    if (size < MIN_RECORD) {
        corrupt(error, offset, "impossible record size %d", (int)size);
        return -1;
    }
    if (size > avail) {
        corrupt(error, offset, "%d bytes long, only %zd bytes left", (int)size, avail);
        return -1;
    }
    if (get_be32(rec + R_SYS_FLAG) & V6_FLAGS) {
        corrupt(error, offset, "IPv6 hosts, which mqcore does not read");
        return -1;
    }
    int32_t body_len = (int32_t)get_be32(rec + R_BODY_LEN);
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
            capacity += bufs[2 * s].len / MIN_RECORD + 1;
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
                usize = (int32_t)get_be32(units + i * UNIT_SIZE + 8);
                pos = (Py_ssize_t)(offset - bases[s]);
                if (filter_codes != NULL) { /* the consume-queue stage: the record unread */
                    long long code = (long long)get_be64(units + i * UNIT_SIZE + 12);
                    Py_ssize_t k = 0;
                    while (k < ncodes && codes[k] != code)
                        k++;
                    if (k == ncodes)
                        continue;
                }
            }
            else if (len - pos >= R_PHYS + 8)
                offset = (long long)get_be64(buf + pos + R_PHYS); /* as the record says */
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
            if ((long long)get_be64(p->rec + R_QUEUE_OFFSET) >= end_offset) {
                finished = 1;
                break;
            }
            long long ts = (long long)get_be64(p->rec + R_STORE_TS);
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
            if (want_body && (get_be32(p->rec + R_SYS_FLAG) & COMPRESSED_FLAG)) {
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
    static const int fixed_pos[] = {R_QUEUE_ID, R_QUEUE_OFFSET, R_PHYS, R_BORN_TS,
                                    R_STORE_TS, R_RECONSUME};
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
                d[2 * k] = (unsigned char)hex[r[R_STORE_IP + k] >> 4];
                d[2 * k + 1] = (unsigned char)hex[r[R_STORE_IP + k] & 0xF];
                d[16 + 2 * k] = (unsigned char)hex[r[R_PHYS + k] >> 4];
                d[16 + 2 * k + 1] = (unsigned char)hex[r[R_PHYS + k] & 0xF];
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

/* Java's String.hashCode of UTF-8 text (over its UTF-16 code units), as a signed int. */
static int32_t java_hash(const unsigned char *s, Py_ssize_t n)
{
    uint32_t h = 0;
    Py_ssize_t i = 0;
    while (i < n) {
        uint32_t cp;
        unsigned char c = s[i];
        if (c < 0x80) {
            cp = c;
            i += 1;
        }
        else if (c < 0xE0 && i + 1 < n) {
            cp = ((uint32_t)(c & 0x1F) << 6) | (s[i + 1] & 0x3F);
            i += 2;
        }
        else if (c < 0xF0 && i + 2 < n) {
            cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) |
                 (s[i + 2] & 0x3F);
            i += 3;
        }
        else if (i + 3 < n) {
            cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
                 ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
            i += 4;
        }
        else { /* not UTF-8 (Arrow strings are): hash the byte, as far as it goes */
            cp = c;
            i += 1;
        }
        if (cp >= 0x10000) {
            cp -= 0x10000;
            h = 31 * h + (0xD800 + (cp >> 10));
            h = 31 * h + (0xDC00 + (cp & 0x3FF));
        }
        else
            h = 31 * h + cp;
    }
    return (int32_t)h;
}

#define MAX_PROPERTIES 32767

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
    strcol_t body, tags, keys, pkeys, pvalues;
    Py_buffer map_valid, map_offsets, replay_valid, replay_data;
    int has_map = 0, has_map_valid = 0, has_replay = 0, has_replay_valid = 0;
    PyObject *out = NULL, *zero = NULL, *result = NULL;
    memset(&body, 0, sizeof(body));
    memset(&tags, 0, sizeof(tags));
    memset(&keys, 0, sizeof(keys));
    memset(&pkeys, 0, sizeof(pkeys));
    memset(&pvalues, 0, sizeof(pvalues));
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "arrow_prepare: n must be >= 0");
        return NULL;
    }
    if (strcol_get(body_obj, n, "body", &body) < 0 || strcol_get(tags_obj, n, "tags", &tags) < 0 ||
        strcol_get(keys_obj, n, "keys", &keys) < 0)
        goto done;
    if (!body.present) {
        PyErr_SetString(PyExc_ValueError, "arrow_prepare: the body column is required");
        goto done;
    }
    const int32_t *moff = NULL;
    if (props_obj != Py_None) {
        /* (map validity, map offsets, (key column), (value column)) */
        if (!PyTuple_Check(props_obj) || PyTuple_GET_SIZE(props_obj) != 4) {
            PyErr_SetString(PyExc_TypeError, "properties: (validity, offsets, keys, values)");
            goto done;
        }
        if (PyTuple_GET_ITEM(props_obj, 0) != Py_None) {
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(props_obj, 0), &map_valid, PyBUF_SIMPLE) < 0)
                goto done;
            has_map_valid = 1;
            if (map_valid.len < (n + 7) / 8) {
                PyErr_SetString(PyExc_ValueError, "properties: validity bitmap too short");
                goto done;
            }
        }
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(props_obj, 1), &map_offsets, PyBUF_SIMPLE) < 0)
            goto done;
        has_map = 1;
        if (map_offsets.len < 4 * (n + 1)) {
            PyErr_SetString(PyExc_ValueError, "properties: too few offsets");
            goto done;
        }
        moff = (const int32_t *)map_offsets.buf;
        Py_ssize_t entries = n ? moff[n] : 0;
        for (Py_ssize_t i = 0; i < n; i++)
            if (moff[i] < 0 || moff[i] > moff[i + 1]) {
                PyErr_Format(PyExc_ValueError, "properties: bad offsets at row %zd", i);
                goto done;
            }
        if ((n && moff[0] < 0) ||
            strcol_get(PyTuple_GET_ITEM(props_obj, 2), entries, "property names", &pkeys) < 0 ||
            strcol_get(PyTuple_GET_ITEM(props_obj, 3), entries, "property values", &pvalues) < 0)
            goto done;
        if (!pkeys.present || !pvalues.present) {
            PyErr_SetString(PyExc_ValueError, "properties: names and values are required");
            goto done;
        }
    }
    const int64_t *replay = NULL;
    if (replay_obj != Py_None) {
        if (!PyTuple_Check(replay_obj) || PyTuple_GET_SIZE(replay_obj) != 2) {
            PyErr_SetString(PyExc_TypeError, "replay: (validity, int64 values)");
            goto done;
        }
        if (PyTuple_GET_ITEM(replay_obj, 0) != Py_None) {
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(replay_obj, 0), &replay_valid, PyBUF_SIMPLE) < 0)
                goto done;
            has_replay_valid = 1;
            if (replay_valid.len < (n + 7) / 8) {
                PyErr_SetString(PyExc_ValueError, "replay: validity bitmap too short");
                goto done;
            }
        }
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(replay_obj, 1), &replay_data, PyBUF_SIMPLE) < 0)
            goto done;
        has_replay = 1;
        if (replay_data.len < 8 * n) {
            PyErr_SetString(PyExc_ValueError, "replay: too few values");
            goto done;
        }
        replay = (const int64_t *)replay_data.buf;
    }
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
    static const char replay_name[] = "REPLAY_ID";
    const Py_ssize_t replay_name_len = sizeof(replay_name) - 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *b = NULL, *t = NULL, *k = NULL;
        Py_ssize_t blen = 0, tlen = 0, klen = 0;
        if (!strcol_value(&body, i, &b, &blen)) {
            b = (const unsigned char *)"";
            blen = 0; /* a null body is stored empty */
        }
        int has_tag = strcol_value(&tags, i, &t, &tlen);
        int has_key = strcol_value(&keys, i, &k, &klen);
        if ((has_tag && has_separator(t, tlen)) || (has_key && has_separator(k, klen)))
            goto slow;
        /* The property string: user properties, REPLAY_ID, TAGS, KEYS (message_trailer's
         * order). */
        Py_ssize_t first = 0, last = 0, plen = 0;
        int replay_named = 0;
        if (has_map && !(has_map_valid && !bit_set(&map_valid, i))) {
            first = moff[i];
            last = moff[i + 1];
        }
        for (Py_ssize_t e = first; e < last; e++) {
            const unsigned char *name, *value;
            Py_ssize_t name_len, value_len;
            if (!strcol_value(&pkeys, e, &name, &name_len) ||
                !strcol_value(&pvalues, e, &value, &value_len) || name_len == 0 ||
                has_separator(name, name_len) || has_separator(value, value_len))
                goto slow; /* Message's checks say what is wrong */
            for (Py_ssize_t r = 0; r < nreserved; r++) {
                PyObject *rn = PyTuple_GET_ITEM(reserved, r);
                if (PyBytes_GET_SIZE(rn) == name_len &&
                    memcmp(PyBytes_AS_STRING(rn), name, (size_t)name_len) == 0)
                    goto slow;
            }
            for (Py_ssize_t o = first; o < e; o++) { /* a name twice: dict semantics */
                const unsigned char *other;
                Py_ssize_t other_len;
                strcol_value(&pkeys, o, &other, &other_len);
                if (other_len == name_len && memcmp(other, name, (size_t)name_len) == 0)
                    goto slow;
            }
            if (name_len == replay_name_len && memcmp(name, replay_name, (size_t)name_len) == 0)
                replay_named = 1;
            plen += name_len + value_len + 2;
        }
        char replay_text[24];
        Py_ssize_t replay_len = 0;
        if (replay && !replay_named && !(has_replay_valid && !bit_set(&replay_valid, i))) {
            replay_len = PyOS_snprintf(replay_text, sizeof(replay_text), "%lld",
                                       (long long)replay[i]);
            plen += replay_name_len + replay_len + 2;
        }
        if (has_tag && tlen)
            plen += 4 + tlen + 2;
        if (has_key && klen)
            plen += 4 + klen + 2;
        if (plen > MAX_PROPERTIES)
            goto slow;
        PyObject *trailer = PyBytes_FromStringAndSize(NULL, head_len + 2 + plen);
        if (trailer == NULL)
            goto done;
        unsigned char *w = BYTES(trailer);
        memcpy(w, head, (size_t)head_len);
        w += head_len;
        *w++ = (unsigned char)(plen >> 8);
        *w++ = (unsigned char)plen;
#define PUT_PAIR(np, nl, vp, vl)                                                             \
    do {                                                                                     \
        memcpy(w, (np), (size_t)(nl));                                                       \
        w += (nl);                                                                           \
        *w++ = 1;                                                                            \
        memcpy(w, (vp), (size_t)(vl));                                                       \
        w += (vl);                                                                           \
        *w++ = 2;                                                                            \
    } while (0)
        for (Py_ssize_t e = first; e < last; e++) {
            const unsigned char *name, *value;
            Py_ssize_t name_len, value_len;
            strcol_value(&pkeys, e, &name, &name_len);
            strcol_value(&pvalues, e, &value, &value_len);
            PUT_PAIR(name, name_len, value, value_len);
        }
        if (replay_len)
            PUT_PAIR(replay_name, replay_name_len, replay_text, replay_len);
        if (has_tag && tlen)
            PUT_PAIR("TAGS", 4, t, tlen);
        if (has_key && klen)
            PUT_PAIR("KEYS", 4, k, klen);
#undef PUT_PAIR
        PyObject *body_bytes = PyBytes_FromStringAndSize((const char *)b, blen);
        PyObject *crc = body_bytes ? PyObject_CallOneArg(crc32, body_bytes) : NULL;
        unsigned long crc_value = crc ? PyLong_AsUnsignedLongMask(crc) : 0;
        Py_XDECREF(crc);
        PyObject *keys_str = NULL;
        if (crc != NULL && !(crc_value == (unsigned long)-1 && PyErr_Occurred())) {
            keys_str = has_key ? PyUnicode_DecodeUTF8((const char *)k, klen, "strict")
                               : Py_NewRef(Py_None);
        }
        PyObject *item = keys_str ? PyTuple_New(P_FIELDS) : NULL;
        PyObject *size = item ? PyLong_FromSsize_t(HEADER_SIZE + blen + head_len + 2 + plen)
                              : NULL;
        PyObject *crc_obj = size ? PyLong_FromUnsignedLong(crc_value & 0x7FFFFFFFUL) : NULL;
        PyObject *code = crc_obj ? PyLong_FromLong(has_tag && tlen ? java_hash(t, tlen) : 0)
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
    strcol_release(&body);
    strcol_release(&tags);
    strcol_release(&keys);
    strcol_release(&pkeys);
    strcol_release(&pvalues);
    if (has_map_valid)
        PyBuffer_Release(&map_valid);
    if (has_map)
        PyBuffer_Release(&map_offsets);
    if (has_replay_valid)
        PyBuffer_Release(&replay_valid);
    if (has_replay)
        PyBuffer_Release(&replay_data);
    return result;
}

/* --- a message's fields without a getattr each ---------------------------------------- */

/* mqcore.Message keeps its fields in slots: for one type at a time, the offsets of its
 * member descriptors are cached, while its attribute-cache version tag says the type was
 * not changed since. Any other type, or an empty slot, is read with PyObject_GetAttr, as
 * is every field when the cache cannot be filled. */
enum { F_BODY, F_PROPERTIES, F_TAGS, F_KEYS, F_TOPIC, F_DELAY, F_FLAG, NFIELDS };
static PyObject **field_names[NFIELDS] = {&s_body,  &s_properties,  &s_tags, &s_keys,
                                          &s_topic, &s_delay_level, &s_flag};
static PyTypeObject *fields_type;    /* the type whose offsets are cached, or NULL */
static unsigned int fields_version;  /* its version tag then */
static Py_ssize_t fields_offset[NFIELDS];

static int fields_cached(PyTypeObject *type)
{
    if (!PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG))
        return 0;
    if (type == fields_type && type->tp_version_tag == fields_version)
        return 1;
    if (type->tp_getattro != PyObject_GenericGetAttr)
        return 0;
    Py_ssize_t offsets[NFIELDS];
    for (int i = 0; i < NFIELDS; i++) {
        PyObject *d = _PyType_Lookup(type, *field_names[i]); /* borrowed, no error set */
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type))
            return 0;
        PyMemberDef *def = ((PyMemberDescrObject *)d)->d_member;
        if (def->type != T_OBJECT_EX || def->offset <= 0)
            return 0;
        offsets[i] = def->offset;
    }
    if (!PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG))
        return 0;
    memcpy(fields_offset, offsets, sizeof offsets);
    fields_type = type;
    fields_version = type->tp_version_tag;
    return 1;
}

/* Field ``f`` of ``m`` (new reference), or NULL with an error set, as PyObject_GetAttr. */
static PyObject *get_field(PyObject *m, int f)
{
    if (fields_cached(Py_TYPE(m))) {
        PyObject *v = *(PyObject **)((char *)m + fields_offset[f]);
        if (v != NULL)
            return Py_NewRef(v);
    }
    return PyObject_GetAttr(m, *field_names[f]);
}

/* --- the broker's checks of a sent batch (broker._check_messages) -------------------- */

/* An exact str of ASCII text without a property separator (non-empty when ``nonempty``). */
static int clean_ascii(PyObject *s, int nonempty)
{
    if (!PyUnicode_CheckExact(s))
        return 0;
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(s) < 0) {
        PyErr_Clear();
        return 0;
    }
#endif
    if (!PyUnicode_IS_ASCII(s))
        return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    if (nonempty && n == 0)
        return 0;
    const char *p = (const char *)PyUnicode_1BYTE_DATA(s);
    return memchr(p, 1, (size_t)n) == NULL && memchr(p, 2, (size_t)n) == NULL;
}

/* 1 when message ``m`` certainly passes the broker's checks for ``topic`` (see
 * validation.sent_fast_ok, its reference), 0 when the Python checks must decide; never
 * raises (an error reading a field is cleared: the Python checks meet it again). */
static int sent_one(PyObject *m, PyObject *topic, long long limit, PyObject *refusable)
{
    int ok = 0;
    PyObject *t = NULL, *body = NULL, *tags = NULL, *keys = NULL, *level = NULL, *props = NULL;
    if ((t = get_field(m, F_TOPIC)) == NULL)
        goto done;
    if (!PyUnicode_CheckExact(t) || PyUnicode_Compare(t, topic) != 0)
        goto done;
    if ((body = get_field(m, F_BODY)) == NULL)
        goto done;
    if (!PyBytes_CheckExact(body) || PyBytes_GET_SIZE(body) == 0 ||
        PyBytes_GET_SIZE(body) > limit)
        goto done;
    if ((tags = get_field(m, F_TAGS)) == NULL)
        goto done;
    if (tags != Py_None && !clean_ascii(tags, 0))
        goto done;
    if ((keys = get_field(m, F_KEYS)) == NULL)
        goto done;
    if (keys != Py_None && !clean_ascii(keys, 0))
        goto done;
    if ((level = get_field(m, F_DELAY)) == NULL || !PyLong_CheckExact(level))
        goto done;
    int overflow;
    long long lv = PyLong_AsLongLongAndOverflow(level, &overflow);
    if (overflow || lv < 0)
        goto done;
    if ((props = get_field(m, F_PROPERTIES)) == NULL || !PyDict_CheckExact(props))
        goto done;
    if (PyDict_GET_SIZE(props) == 0) {
        ok = 1;
        goto done;
    }
    if (lv != 0)
        goto done;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(props, &pos, &k, &v)) {
        /* Nothing below runs Python code: the dict cannot change while it is read. */
        if (!clean_ascii(k, 1) || !clean_ascii(v, 0))
            goto done;
        int refused = PySet_Contains(refusable, k);
        if (refused != 0)
            goto done;
    }
    ok = 1;
done:
    if (PyErr_Occurred())
        PyErr_Clear();
    Py_XDECREF(t);
    Py_XDECREF(body);
    Py_XDECREF(tags);
    Py_XDECREF(keys);
    Py_XDECREF(level);
    Py_XDECREF(props);
    return ok;
}

PyDoc_STRVAR(sent_prefix_doc,
"sent_prefix(messages, topic, limit, refusable) -> int\n\n"
"How many leading messages of a sent batch certainly pass the broker's checks for\n"
"``topic`` (body of 1..limit bytes, ASCII text without separators, no property name in\n"
"the frozenset ``refusable``...): validation.sent_fast_ok is the reference. The broker\n"
"checks the rest with the Python code, which raises what it always raised.");

static PyObject *speedups_sent_prefix(PyObject *self, PyObject *args)
{
    PyObject *messages, *topic, *refusable;
    long long limit;
    if (!PyArg_ParseTuple(args, "OULO!:sent_prefix", &messages, &topic, &limit,
                          &PyFrozenSet_Type, &refusable))
        return NULL;
    PyObject *seq = PySequence_Fast(messages, "sent_prefix: messages must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), i = 0;
    if (PyUnicode_CheckExact(topic)) {
        for (; i < n; i++) {
            if (!sent_one(PySequence_Fast_GET_ITEM(seq, i), topic, limit, refusable))
                break;
        }
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(i);
}

/* --- holding timer messages (broker.schedule.DelayService.put) ---------------------- */

#define HOLD_PAIRS (FAST_PROPERTIES + 3) /* the message's, TIMER_OUT_MS, REAL_TOPIC/QID */

static int same_text(const char *s, Py_ssize_t n, const char *lit)
{
    size_t len = strlen(lit);
    return (size_t)n == len && memcmp(s, lit, len) == 0;
}

/* The prepared tuple of timer message ``m`` held in ``timer_topic`` for ``topic``/``qid``
 * (new reference), Py_None when the Python code must hold it (new reference), NULL on
 * error; ``*uniq`` its UNIQ_KEY (a new reference) when it has one and it is taken.
 * schedule.py_hold_timers is the reference. */
static PyObject *hold_one(PyObject *m, const char *topic_s, Py_ssize_t topic_len,
                          const char *qid_s, Py_ssize_t qid_len, const char *tt_s,
                          Py_ssize_t tt_len, long long now, long long max_delay,
                          PyObject *born, PyObject *recon, PyObject *sflag, PyObject *zero,
                          PyObject *crc32, PyObject **uniq)
{
    PyObject *result = NULL, *props = NULL, *tags = NULL, *keys = NULL, *level = NULL;
    PyObject *body = NULL, *flag = NULL;
    PyObject *held[2 * FAST_PROPERTIES];
    const char *text[2 * HOLD_PAIRS];
    Py_ssize_t lens[2 * HOLD_PAIRS];
    Py_ssize_t nheld = 0, ntext = 0;
    Py_ssize_t tags_len = 0, keys_len = 0;
    const char *tags_s = NULL, *keys_s = NULL;
    char out_s[24];
    int seen_topic = 0, seen_qid = 0;
    long long deliver = -1;
    if ((props = get_field(m, F_PROPERTIES)) == NULL ||
        (tags = get_field(m, F_TAGS)) == NULL ||
        (keys = get_field(m, F_KEYS)) == NULL ||
        (level = get_field(m, F_DELAY)) == NULL ||
        (body = get_field(m, F_BODY)) == NULL ||
        (flag = get_field(m, F_FLAG)) == NULL)
        goto done;
    result = Py_None; /* from here on, "goto done" with result Py_None declines */
    if (!PyDict_CheckExact(props) || PyDict_GET_SIZE(props) > FAST_PROPERTIES ||
        !PyLong_CheckExact(level) || !PyBytes_CheckExact(body))
        goto done;
    int overflow;
    long long lv = PyLong_AsLongLongAndOverflow(level, &overflow);
    if (lv != 0 || overflow) {
        PyErr_Clear();
        goto done;
    }
    if (tags != Py_None && (tags_s = utf8_of(tags, &tags_len)) == NULL)
        goto done;
    if (keys != Py_None && (keys_s = utf8_of(keys, &keys_len)) == NULL)
        goto done;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(props, &pos, &k, &v)) {
        held[nheld++] = Py_NewRef(k);
        held[nheld++] = Py_NewRef(v);
    }
    text[0] = "TIMER_OUT_MS";
    lens[0] = 12;
    text[1] = out_s;
    ntext = 2;
    for (Py_ssize_t i = 0; i < nheld; i += 2) {
        Py_ssize_t kl, vl;
        const char *ks = utf8_of(held[i], &kl), *vs = utf8_of(held[i + 1], &vl);
        if (ks == NULL || vs == NULL)
            goto done;
        if (same_text(ks, kl, "UNIQ_KEY")) {
            Py_XSETREF(*uniq, Py_NewRef(held[i + 1]));
        } else if (same_text(ks, kl, "TIMER_DELIVER_MS")) {
            if ((deliver = deliver_digits(vs, vl)) < 0)
                goto done;
        } else if (same_text(ks, kl, "TIMER_DELAY_MS") || same_text(ks, kl, "TIMER_DELAY_SEC") ||
                   same_text(ks, kl, "TIMER_OUT_MS")) {
            goto done;
        } else if (same_text(ks, kl, "REAL_TOPIC")) {
            vs = topic_s;
            vl = topic_len;
            seen_topic = 1;
        } else if (same_text(ks, kl, "REAL_QID")) {
            vs = qid_s;
            vl = qid_len;
            seen_qid = 1;
        }
        text[ntext] = ks;
        lens[ntext++] = kl;
        text[ntext] = vs;
        lens[ntext++] = vl;
    }
    if (deliver <= now || deliver - now > max_delay)
        goto done; /* not asked for, due already, or too far ahead: the Python code says */
    { /* 0 <= deliver < 10**18 */
        char digits[24];
        int nd = 0;
        long long v = deliver;
        do {
            digits[nd++] = (char)('0' + v % 10);
            v /= 10;
        } while (v > 0);
        for (int j = 0; j < nd; j++)
            out_s[j] = digits[nd - 1 - j];
        lens[1] = nd;
    }
    if (!seen_topic) {
        text[ntext] = "REAL_TOPIC";
        lens[ntext++] = 10;
        text[ntext] = topic_s;
        lens[ntext++] = topic_len;
    }
    if (!seen_qid) {
        text[ntext] = "REAL_QID";
        lens[ntext++] = 8;
        text[ntext] = qid_s;
        lens[ntext++] = qid_len;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < ntext; i++)
        total += lens[i] + 1;
    if (tags_len)
        total += 5 + tags_len + 1;
    if (keys_len)
        total += 5 + keys_len + 1;
    if (total > MAX_PROPERTY_TEXT)
        goto done;
    result = NULL;
    PyObject *trailer = PyBytes_FromStringAndSize(NULL, 1 + tt_len + 2 + total);
    if (trailer == NULL)
        goto done;
    char *p = PyBytes_AS_STRING(trailer);
    *p++ = (char)tt_len;
    memcpy(p, tt_s, (size_t)tt_len);
    p += tt_len;
    *p++ = (char)(total >> 8);
    *p++ = (char)(total & 0xFF);
    p = put_property_text(p, text, lens, ntext, tags_s, tags_len, keys_s, keys_len, NULL, 0);
    assert(p == PyBytes_AS_STRING(trailer) + PyBytes_GET_SIZE(trailer));
    PyObject *crc_obj = PyObject_CallOneArg(crc32, body);
    if (crc_obj == NULL) {
        Py_DECREF(trailer);
        goto done;
    }
    unsigned long crc = PyLong_AsUnsignedLongMask(crc_obj);
    Py_DECREF(crc_obj);
    if (crc == (unsigned long)-1 && PyErr_Occurred()) {
        Py_DECREF(trailer);
        goto done;
    }
    PyObject *item = PyTuple_New(P_FIELDS);
    PyObject *size = PyLong_FromSsize_t(HEADER_SIZE + PyBytes_GET_SIZE(body) +
                                        PyBytes_GET_SIZE(trailer));
    PyObject *crc_masked = PyLong_FromUnsignedLong(crc & 0x7FFFFFFFUL);
    PyObject *code = PyLong_FromLongLong(deliver);
    if (item == NULL || size == NULL || crc_masked == NULL || code == NULL) {
        Py_XDECREF(item);
        Py_XDECREF(size);
        Py_XDECREF(crc_masked);
        Py_XDECREF(code);
        Py_DECREF(trailer);
        goto done;
    }
    fill_prepared(item, size, Py_NewRef(body), trailer, crc_masked, Py_NewRef(flag),
                  Py_NewRef(sflag), Py_NewRef(born), Py_NewRef(recon), Py_NewRef(zero), code,
                  Py_NewRef(keys));
    result = item;
done:
    if (result == Py_None) {
        if (PyErr_Occurred())
            PyErr_Clear();
        Py_INCREF(result);
    }
    for (Py_ssize_t i = 0; i < nheld; i++)
        Py_DECREF(held[i]);
    Py_XDECREF(props);
    Py_XDECREF(tags);
    Py_XDECREF(keys);
    Py_XDECREF(level);
    Py_XDECREF(body);
    Py_XDECREF(flag);
    return result;
}

PyDoc_STRVAR(hold_timers_doc,
"hold_timers(messages, topic, qid, now, max_delay_ms, born_timestamp, reconsume_times,\n"
"            sys_flag, crc32, timer_topic) -> (list, list | None) | None\n\n"
"The prepared tuples (codec.Prepared's layout) of timer messages held in ``timer_topic``\n"
"for ``topic`` and queue ``qid`` (a str): TIMER_OUT_MS first, the message's properties\n"
"(a client's REAL_TOPIC/REAL_QID replaced in place), REAL_TOPIC and REAL_QID, TAGS and\n"
"KEYS, the deliver time as tags code; with their UNIQ_KEY values (None where a message\n"
"has none, None for none at all). None when any message needs the Python code\n"
"(schedule.py_hold_timers is the reference and says which).");

static PyObject *speedups_hold_timers(PyObject *self, PyObject *args)
{
    PyObject *messages, *topic, *qid, *born, *recon, *sflag, *crc32, *timer_topic;
    long long now, max_delay;
    if (!PyArg_ParseTuple(args, "OUULLOOOOU:hold_timers", &messages, &topic, &qid, &now,
                          &max_delay, &born, &recon, &sflag, &crc32, &timer_topic))
        return NULL;
    Py_ssize_t topic_len, qid_len, tt_len;
    const char *topic_s = utf8_of(topic, &topic_len);
    const char *qid_s = utf8_of(qid, &qid_len);
    const char *tt_s = utf8_of(timer_topic, &tt_len);
    if (topic_s == NULL || qid_s == NULL || tt_s == NULL || tt_len < 1 || tt_len > MAX_TOPIC)
        Py_RETURN_NONE;
    PyObject *seq = PySequence_Tuple(messages);
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    PyObject *uniqs = PyList_New(n);
    PyObject *zero = PyLong_FromLong(0);
    int any_uniq = 0;
    if (out == NULL || uniqs == NULL || zero == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *uniq = NULL;
        PyObject *item = hold_one(PyTuple_GET_ITEM(seq, i), topic_s, topic_len, qid_s, qid_len,
                                  tt_s, tt_len, now, max_delay, born, recon, sflag, zero, crc32,
                                  &uniq);
        if (item == NULL || item == Py_None) {
            Py_XDECREF(uniq);
            if (item == NULL)
                goto fail;
            Py_DECREF(out);
            Py_DECREF(uniqs);
            Py_DECREF(zero);
            Py_DECREF(seq);
            return item;
        }
        PyList_SET_ITEM(out, i, item);
        if (uniq != NULL)
            any_uniq = 1;
        PyList_SET_ITEM(uniqs, i, uniq != NULL ? uniq : Py_NewRef(Py_None));
    }
    Py_DECREF(zero);
    Py_DECREF(seq);
    PyObject *pair = Py_BuildValue("(NN)", out, any_uniq ? uniqs : Py_NewRef(Py_None));
    if (!any_uniq)
        Py_DECREF(uniqs);
    return pair;
fail:
    Py_XDECREF(out);
    Py_XDECREF(uniqs);
    Py_XDECREF(zero);
    Py_DECREF(seq);
    return NULL;
}

/* --- the timer wheel's enqueue loop (plugins.delay_timer_wheel) ---------------------- */

#define CQ_UNIT 20
#define TIMER_UNIT 56
#define SLOT_BYTES 32
#define TIMER_UNIT_MAGIC 0x54494D52
#define MIN_DELIVER_CODE (1LL << 31)

static long long floor_div(long long a, long long b)
{
    long long q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static long long floor_mod(long long a, long long b) { return a - floor_div(a, b) * b; }

PyDoc_STRVAR(link_timers_doc,
"link_timers(units, start, offset, forced, read_ms, precision_ms, slots, horizon, now,\n"
"            pos, seg_end, top_slot, wheel, changed, before, out)\n"
"    -> (index, pos, top_slot, status)\n\n"
"The timer wheel's enqueue loop over consume-queue ``units`` (the first at queue offset\n"
"``offset``) from index ``start``: see delay_timer_wheel.py_link_timers, the reference.");

static PyObject *slot_tuple(long long t, long long due, long long last, long long num)
{
    PyObject *tuple = PyTuple_New(4);
    if (tuple == NULL)
        return NULL;
    long long values[4] = {t, due, last, num};
    for (Py_ssize_t i = 0; i < 4; i++) {
        PyObject *v = PyLong_FromLongLong(values[i]);
        if (v == NULL) {
            Py_DECREF(tuple);
            return NULL;
        }
        PyTuple_SET_ITEM(tuple, i, v);
    }
    return tuple;
}

static PyObject *speedups_link_timers(PyObject *self, PyObject *args)
{
    Py_buffer units, wheel;
    Py_ssize_t start;
    long long offset, forced, read_ms, prec, nslots, horizon, now, pos, seg_end, top_slot;
    PyObject *changed, *before, *out;
    if (!PyArg_ParseTuple(args, "y*nLLLLLLLLLLy*O!O!O!:link_timers", &units, &start, &offset,
                          &forced, &read_ms, &prec, &nslots, &horizon, &now, &pos, &seg_end,
                          &top_slot, &wheel, &PyDict_Type, &changed, &PyDict_Type, &before,
                          &PyByteArray_Type, &out))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = units.len / CQ_UNIT, i = start;
    Py_ssize_t have = PyByteArray_GET_SIZE(out);
    int status = 0;
    if (prec <= 0 || nslots <= 0 || start < 0) {
        PyErr_SetString(PyExc_ValueError, "link_timers: precision and slots must be > 0");
        goto done;
    }
    if (i < n && PyByteArray_Resize(out, have + (n - i) * TIMER_UNIT) < 0)
        goto done;
    unsigned char *w = (unsigned char *)PyByteArray_AS_STRING(out) + have;
    const unsigned char *u = (const unsigned char *)units.buf;
    for (; i < n; i++) {
        const unsigned char *unit = u + i * CQ_UNIT;
        long long phys = (long long)get_be64(unit);
        long long size = (int32_t)get_be32(unit + 8);
        long long deliver = (long long)get_be64(unit + 12);
        if (i == start && forced >= 0) {
            deliver = forced;
        } else if (deliver < MIN_DELIVER_CODE) {
            status = 3; /* no deliver time in the unit: read the record */
            break;
        }
        long long slot_ms = deliver - floor_mod(deliver, prec);
        if (slot_ms < read_ms) {
            slot_ms = read_ms;
        } else if (slot_ms >= horizon) {
            status = 1; /* blocked: the cursor must catch up first */
            break;
        }
        if (pos >= seg_end) {
            status = 2; /* this unit opens the next log segment */
            break;
        }
        long long index = floor_mod(floor_div(slot_ms, prec), nslots);
        PyObject *key = PyLong_FromLongLong(index);
        if (key == NULL)
            goto done;
        long long t, due, last, num;
        PyObject *slot = PyDict_GetItemWithError(changed, key); /* borrowed */
        if (slot == NULL) {
            if (PyErr_Occurred() ||
                (index + 1) * SLOT_BYTES > (long long)wheel.len) {
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_IndexError, "link_timers: slot %lld is past the wheel",
                                 index);
                Py_DECREF(key);
                goto done;
            }
            const unsigned char *s = (const unsigned char *)wheel.buf + index * SLOT_BYTES;
            t = (long long)get_be64(s);
            due = (long long)get_be64(s + 8);
            last = (long long)get_be64(s + 16);
            num = (int32_t)get_be32(s + 24);
            PyObject *was = slot_tuple(t, due, last, num);
            if (was == NULL || PyDict_SetItem(before, key, was) < 0) {
                Py_XDECREF(was);
                Py_DECREF(key);
                goto done;
            }
            Py_DECREF(was);
        } else {
            if (!PyTuple_Check(slot) || PyTuple_GET_SIZE(slot) != 4) {
                PyErr_SetString(PyExc_TypeError, "link_timers: a changed slot is not a 4-tuple");
                Py_DECREF(key);
                goto done;
            }
            t = PyLong_AsLongLong(PyTuple_GET_ITEM(slot, 0));
            due = PyLong_AsLongLong(PyTuple_GET_ITEM(slot, 1));
            last = PyLong_AsLongLong(PyTuple_GET_ITEM(slot, 2));
            num = PyLong_AsLongLong(PyTuple_GET_ITEM(slot, 3));
            if (PyErr_Occurred()) {
                Py_DECREF(key);
                goto done;
            }
        }
        if (t != slot_ms) { /* a new round of this slot */
            due = 0;
            last = -1;
            num = 0;
        }
        put_be64(w, (uint64_t)last);
        put_be64(w + 8, (uint64_t)deliver);
        put_be64(w + 16, (uint64_t)slot_ms);
        put_be64(w + 24, (uint64_t)(offset + i));
        put_be64(w + 32, (uint64_t)phys);
        put_be64(w + 40, (uint64_t)now);
        put_be32(w + 48, (uint32_t)size);
        put_be32(w + 52, (uint32_t)TIMER_UNIT_MAGIC);
        w += TIMER_UNIT;
        PyObject *now_slot = slot_tuple(slot_ms, deliver > due ? deliver : due, pos, num + 1);
        if (now_slot == NULL || PyDict_SetItem(changed, key, now_slot) < 0) {
            Py_XDECREF(now_slot);
            Py_DECREF(key);
            goto done;
        }
        Py_DECREF(now_slot);
        Py_DECREF(key);
        if (slot_ms > top_slot)
            top_slot = slot_ms;
        pos += TIMER_UNIT;
    }
    if (PyByteArray_Resize(out, (char *)w - PyByteArray_AS_STRING(out)) < 0)
        goto done;
    result = Py_BuildValue("(nLLi)", i, pos, top_slot, status);
done:
    if (result == NULL && PyByteArray_GET_SIZE(out) > have && PyErr_Occurred()) {
        /* leave ``out`` as it was given */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        if (PyByteArray_Resize(out, have) < 0)
            PyErr_Clear();
        PyErr_Restore(type, value, tb);
    }
    PyBuffer_Release(&units);
    PyBuffer_Release(&wheel);
    return result;
}

PyDoc_STRVAR(write_slots_doc,
"write_slots(wheel, slots) -> None\n\n"
"Write each ``index: (slot time, latest deliver time, last pos, units)`` of the dict\n"
"``slots`` into the writable mapped ``wheel`` (32 bytes a slot, the reserved int 0):\n"
"delay_timer_files.py_write_slots is the reference.");

static PyObject *speedups_write_slots(PyObject *self, PyObject *args)
{
    Py_buffer wheel;
    PyObject *slots;
    if (!PyArg_ParseTuple(args, "w*O!:write_slots", &wheel, &PyDict_Type, &slots))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(slots, &pos, &key, &value)) {
        long long index = PyLong_AsLongLong(key);
        if (index == -1 && PyErr_Occurred())
            goto done;
        if (index < 0 || (index + 1) * SLOT_BYTES > (long long)wheel.len) {
            PyErr_Format(PyExc_IndexError, "write_slots: slot %lld is not in the wheel", index);
            goto done;
        }
        if (!PyTuple_Check(value) || PyTuple_GET_SIZE(value) != 4) {
            PyErr_SetString(PyExc_TypeError, "write_slots: a slot is not a 4-tuple");
            goto done;
        }
        long long t = PyLong_AsLongLong(PyTuple_GET_ITEM(value, 0));
        long long due = PyLong_AsLongLong(PyTuple_GET_ITEM(value, 1));
        long long last = PyLong_AsLongLong(PyTuple_GET_ITEM(value, 2));
        long long num = PyLong_AsLongLong(PyTuple_GET_ITEM(value, 3));
        if (PyErr_Occurred())
            goto done;
        if (num < INT32_MIN || num > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "write_slots: a slot's unit count is not an int32");
            goto done;
        }
        unsigned char *p = (unsigned char *)wheel.buf + index * SLOT_BYTES;
        put_be64(p, (uint64_t)t);
        put_be64(p + 8, (uint64_t)due);
        put_be64(p + 16, (uint64_t)last);
        put_be32(p + 24, (uint32_t)num);
        put_be32(p + 28, 0);
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&wheel);
    return result;
}


/* --- decode_batch: a SEND_BATCH_MESSAGE body into Message objects ------------------------ */

PyDoc_STRVAR(decode_batch_doc,
"decode_batch(topic, data, new_message, defaults, fallback, illegal) -> list\n\n"
"The messages of a SEND_BATCH_MESSAGE body; mqcore.protocol.send.py_decode_batch is the\n"
"reference (same messages, same errors). new_message() makes a blank Message, whose other\n"
"fields are set from the (name, value) pairs of defaults, as _wire_message does;\n"
"fallback(topic, body, flag, properties) makes a message whose properties hold TAGS, KEYS or\n"
"DELAY; illegal(text) makes the error raised for a malformed body.");

static PyObject *batch_illegal(PyObject *illegal, const char *format, ...)
{
    va_list va;
    va_start(va, format);
    PyObject *text = PyUnicode_FromFormatV(format, va);
    va_end(va);
    if (text == NULL)
        return NULL;
    PyObject *exc = PyObject_CallOneArg(illegal, text);
    Py_DECREF(text);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* name\x01value\x02... (valid UTF-8) into a dict, as message.parse_properties splits the
   decoded text: the separators are ASCII, so cutting the bytes cuts the text the same way.
   *field is set when a name is TAGS, KEYS or DELAY. */
static PyObject *batch_properties(const char *p, Py_ssize_t n, int *field)
{
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    Py_ssize_t start = 0;
    for (Py_ssize_t i = 0; i <= n; i++) {
        if (i < n && p[i] != '\x02')
            continue;
        const char *item = p + start;
        Py_ssize_t len = i - start;
        const char *sep = memchr(item, '\x01', (size_t)len);
        start = i + 1;
        if (sep == NULL)
            continue;
        Py_ssize_t name_len = sep - item;
        if ((name_len == 4 && (memcmp(item, "TAGS", 4) == 0 || memcmp(item, "KEYS", 4) == 0)) ||
            (name_len == 5 && memcmp(item, "DELAY", 5) == 0))
            *field = 1;
        PyObject *name = PyUnicode_DecodeUTF8(item, name_len, "strict");
        PyObject *value = name == NULL ? NULL : PyUnicode_DecodeUTF8(sep + 1, len - name_len - 1, "strict");
        if (value == NULL || PyDict_SetItem(out, name, value) < 0) {
            Py_XDECREF(name);
            Py_XDECREF(value);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(name);
        Py_DECREF(value);
    }
    return out;
}

static PyObject *speedups_decode_batch(PyObject *self, PyObject *args)
{
    PyObject *topic, *data, *new_message, *defaults, *fallback, *illegal;
    if (!PyArg_ParseTuple(args, "UOOO!OO", &topic, &data, &new_message, &PyTuple_Type, &defaults,
                          &fallback, &illegal))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t pos = 0, end = view.len;
    PyObject *out = PyList_New(0);
    PyObject *zero = PyLong_FromLong(0);
    if (out == NULL || zero == NULL)
        goto fail;
    while (pos < end) {
        if (end - pos < 22) {
            batch_illegal(illegal, "batch body truncated at byte %zd of %zd", pos, end);
            goto fail;
        }
        int32_t size = (int32_t)get_be32(buf + pos);
        int32_t flag = (int32_t)get_be32(buf + pos + 12);
        int32_t body_len = (int32_t)get_be32(buf + pos + 16);
        Py_ssize_t body_at = pos + 20;
        Py_ssize_t props_at = body_at + body_len;
        if (body_len < 0 || size < 22 || props_at + 2 > end) {
            batch_illegal(illegal, "batch message at byte %zd has a bad length (%d, %d)", pos,
                          (int)size, (int)body_len);
            goto fail;
        }
        int16_t props_len = (int16_t)(((unsigned)buf[props_at] << 8) | buf[props_at + 1]);
        Py_ssize_t stop = props_at + 2 + props_len;
        if (props_len < 0 || stop != pos + size || stop > end) {
            batch_illegal(illegal, "batch message at byte %zd has a bad size %d", pos, (int)size);
            goto fail;
        }
        const char *props = (const char *)buf + props_at + 2;
        PyObject *text = NULL;
        if (props_len) {
            /* the whole text first, so that an invalid byte anywhere is the one error */
            text = PyUnicode_DecodeUTF8(props, props_len, "strict");
            if (text == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                    goto fail;
                PyErr_Clear();
                batch_illegal(illegal, "batch message at byte %zd: properties are not UTF-8", pos);
                goto fail;
            }
        }
        PyObject *body = PyBytes_FromStringAndSize((const char *)buf + body_at, body_len);
        if (body == NULL) {
            Py_XDECREF(text);
            goto fail;
        }
        int field = 0;
        PyObject *dict = batch_properties(props, props_len, &field);
        PyObject *msg = NULL;
        if (dict != NULL && field) {
            PyObject *flag_obj = PyLong_FromLong(flag);
            if (flag_obj != NULL)
                msg = PyObject_CallFunctionObjArgs(fallback, topic, body, flag_obj,
                                                   text ? text : Py_None, NULL);
            Py_XDECREF(flag_obj);
        } else if (dict != NULL) {
            msg = PyObject_CallNoArgs(new_message);
            PyObject *flag_obj = msg == NULL ? NULL : PyLong_FromLong(flag);
            int bad = flag_obj == NULL ||
                      PyObject_GenericSetAttr(msg, s_topic, topic) < 0 ||
                      PyObject_GenericSetAttr(msg, s_body, body) < 0 ||
                      PyObject_GenericSetAttr(msg, s_tags, Py_None) < 0 ||
                      PyObject_GenericSetAttr(msg, s_keys, Py_None) < 0 ||
                      PyObject_GenericSetAttr(msg, s_properties, dict) < 0 ||
                      PyObject_GenericSetAttr(msg, s_flag, flag_obj) < 0 ||
                      PyObject_GenericSetAttr(msg, s_delay_level, zero) < 0;
            for (Py_ssize_t i = 0; !bad && i < PyTuple_GET_SIZE(defaults); i++) {
                PyObject *pair = PyTuple_GET_ITEM(defaults, i);
                if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
                    PyErr_SetString(PyExc_TypeError, "decode_batch: defaults are (name, value) pairs");
                    bad = 1;
                    break;
                }
                bad = PyObject_GenericSetAttr(msg, PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1)) < 0;
            }
            Py_XDECREF(flag_obj);
            if (bad)
                Py_CLEAR(msg);
        }
        Py_XDECREF(dict);
        Py_DECREF(body);
        Py_XDECREF(text);
        if (msg == NULL)
            goto fail;
        int appended = PyList_Append(out, msg);
        Py_DECREF(msg);
        if (appended < 0)
            goto fail;
        pos = stop;
    }
    if (PyList_GET_SIZE(out) == 0) {
        batch_illegal(illegal, "the batch holds no message");
        goto fail;
    }
    Py_DECREF(zero);
    PyBuffer_Release(&view);
    return out;
fail:
    Py_XDECREF(out);
    Py_XDECREF(zero);
    PyBuffer_Release(&view);
    return NULL;
}


/* --- encode_batch: a SEND_BATCH_MESSAGE body from Message objects ----------------------- */

PyDoc_STRVAR(encode_batch_doc,
"encode_batch(messages, message_cls) -> bytes | None\n\n"
"The SEND_BATCH_MESSAGE body of a list of messages of exactly message_cls, each without\n"
"tags, keys or delay level, with a dict of str properties, a bytes body and a flag in int32\n"
"(mqcore.protocol.send.py_encode_batch is the reference: the same bytes). None when a\n"
"message is not of that kind: the caller then encodes the whole batch in Python, which\n"
"raises what it raises.");

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} grow_buffer;

static int grow_reserve(grow_buffer *b, Py_ssize_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more)
        cap *= 2;
    char *p = PyMem_Realloc(b->p, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int grow_append(grow_buffer *b, const char *data, Py_ssize_t n)
{
    if (grow_reserve(b, n) < 0)
        return -1;
    memcpy(b->p + b->len, data, (size_t)n);
    b->len += n;
    return 0;
}

/* 1: the text is empty (None or ""), 0: not, -1 on error */
static int falsy_text(PyObject *v)
{
    return v == Py_None || (PyUnicode_CheckExact(v) && PyUnicode_GET_LENGTH(v) == 0);
}

/* Append one message; 1 when done, 0 when it is not of the plain kind, -1 on error. */
static int encode_one(grow_buffer *b, PyObject *m)
{
    int done = 0;
    PyObject *body = PyObject_GetAttr(m, s_body);
    PyObject *flag = body ? PyObject_GetAttr(m, s_flag) : NULL;
    PyObject *tags = flag ? PyObject_GetAttr(m, s_tags) : NULL;
    PyObject *keys = tags ? PyObject_GetAttr(m, s_keys) : NULL;
    PyObject *delay = keys ? PyObject_GetAttr(m, s_delay_level) : NULL;
    PyObject *props = delay ? PyObject_GetAttr(m, s_properties) : NULL;
    if (props == NULL) {
        done = -1;
        goto out;
    }
    if (!PyBytes_CheckExact(body) || !PyLong_CheckExact(flag) || !falsy_text(tags) ||
        !falsy_text(keys) || !PyLong_CheckExact(delay) || !PyDict_CheckExact(props))
        goto out;
    int overflow = 0;
    long flag_v = PyLong_AsLongAndOverflow(flag, &overflow);
    long delay_v = PyLong_AsLongAndOverflow(delay, &overflow);
    if (overflow || flag_v < INT32_MIN || flag_v > INT32_MAX || delay_v != 0)
        goto out;
    Py_ssize_t body_len = PyBytes_GET_SIZE(body);
    Py_ssize_t head_at = b->len;
    if (grow_reserve(b, 20) < 0) {
        done = -1;
        goto out;
    }
    b->len += 20;
    if (grow_append(b, PyBytes_AS_STRING(body), body_len) < 0 || grow_reserve(b, 2) < 0) {
        done = -1;
        goto out;
    }
    Py_ssize_t props_at = b->len;
    b->len += 2;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(props, &pos, &k, &v)) {
        if (!PyUnicode_CheckExact(k) || !PyUnicode_CheckExact(v))
            goto out;
        Py_ssize_t kn, vn;
        const char *ks = PyUnicode_AsUTF8AndSize(k, &kn);
        const char *vs = ks ? PyUnicode_AsUTF8AndSize(v, &vn) : NULL;
        if (vs == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
                done = -1;
                goto out;
            }
            PyErr_Clear(); /* a lone surrogate: Python's encode() raises it */
            goto out;
        }
        if (grow_append(b, ks, kn) < 0 || grow_append(b, "\x01", 1) < 0 ||
            grow_append(b, vs, vn) < 0 || grow_append(b, "\x02", 1) < 0) {
            done = -1;
            goto out;
        }
    }
    Py_ssize_t text_len = b->len - props_at - 2;
    Py_ssize_t size = 20 + body_len + 2 + text_len;
    if (text_len > 32767 || body_len > INT32_MAX || size > INT32_MAX)
        goto out;
    unsigned char *h = (unsigned char *)b->p + head_at;
    put_be32(h, (uint32_t)size);
    put_be32(h + 4, 0);
    put_be32(h + 8, 0);
    put_be32(h + 12, (uint32_t)(int32_t)flag_v);
    put_be32(h + 16, (uint32_t)body_len);
    b->p[props_at] = (char)((text_len >> 8) & 0xFF);
    b->p[props_at + 1] = (char)(text_len & 0xFF);
    done = 1;
out:
    Py_XDECREF(body);
    Py_XDECREF(flag);
    Py_XDECREF(tags);
    Py_XDECREF(keys);
    Py_XDECREF(delay);
    Py_XDECREF(props);
    return done;
}

static PyObject *speedups_encode_batch(PyObject *self, PyObject *args)
{
    PyObject *messages, *cls;
    if (!PyArg_ParseTuple(args, "O!O", &PyList_Type, &messages, &cls))
        return NULL;
    grow_buffer b = {NULL, 0, 0};
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(messages); i++) {
        PyObject *m = PyList_GET_ITEM(messages, i);
        if ((PyObject *)Py_TYPE(m) != cls) {
            PyMem_Free(b.p);
            Py_RETURN_NONE;
        }
        Py_INCREF(m); /* the list may change under a property's __eq__: keep m alive */
        int done = encode_one(&b, m);
        Py_DECREF(m);
        if (done <= 0) {
            PyMem_Free(b.p);
            if (done < 0)
                return NULL;
            Py_RETURN_NONE;
        }
    }
    PyObject *out = PyBytes_FromStringAndSize(b.p ? b.p : "", b.len);
    PyMem_Free(b.p);
    return out;
}

static PyMethodDef speedups_methods[] = {
    {"prepare", speedups_prepare, METH_VARARGS, prepare_doc},
    {"pack", speedups_pack, METH_VARARGS, pack_doc},
    {"units", speedups_units, METH_VARARGS, units_doc},
    {"put_results", speedups_put_results, METH_VARARGS, put_results_doc},
    {"record_columns", speedups_record_columns, METH_VARARGS, record_columns_doc},
    {"arrow_prepare", speedups_arrow_prepare, METH_VARARGS, arrow_prepare_doc},
    {"sent_prefix", speedups_sent_prefix, METH_VARARGS, sent_prefix_doc},
    {"hold_timers", speedups_hold_timers, METH_VARARGS, hold_timers_doc},
    {"link_timers", speedups_link_timers, METH_VARARGS, link_timers_doc},
    {"write_slots", speedups_write_slots, METH_VARARGS, write_slots_doc},
    {"decode_batch", speedups_decode_batch, METH_VARARGS, decode_batch_doc},
    {"encode_batch", speedups_encode_batch, METH_VARARGS, encode_batch_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    "mqcore._speedups",
    "C versions of the per-message loops of a batch put (see mqcore.codec, mqcore.batch).",
    -1,
    speedups_methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    struct {
        PyObject **slot;
        const char *name;
    } names[] = {
        {&s_body, "body"},   {&s_properties, "properties"}, {&s_tags, "tags"},
        {&s_keys, "keys"},   {&s_topic, "topic"},           {&s_delay_level, "delay_level"},
        {&s_flag, "flag"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (*names[i].slot == NULL && (*names[i].slot = PyUnicode_InternFromString(names[i].name)) == NULL)
            return NULL;
    }
    return PyModule_Create(&speedups_module);
}
