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
#include <string.h>

/* Field positions in a prepared item. */
#define P_SIZE 0
#define P_BODY 1
#define P_TRAILER 2
#define P_CRC 3
#define P_FLAG 4
#define P_TAGS_CODE 9
#define P_FIELDS 11

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

PyDoc_STRVAR(prepare_doc,
"prepare(messages, born_timestamp, topic, reconsume_times, sys_flag, crc32, trailer,\n"
"        plain_trailers) -> list\n\n"
"codec.prepare's loop: one Prepared-layout tuple per message. ``crc32(body)`` is the\n"
"checksum function; ``trailer(message, topic)`` returns ``(trailer bytes, tags code)``.\n"
"For messages without properties, tags, keys or delay level, the trailer is looked up in\n"
"the dict ``plain_trailers`` (topic -> bytes) first, which ``trailer`` fills.");

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
    if (!PyArg_ParseTuple(args, "OOOOOOOO!:prepare", &messages, &born, &topic, &recon, &sflag,
                          &crc32, &trailer_fn, &PyDict_Type, &plain_cache))
        return NULL;
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
        PyTuple_SET_ITEM(item, P_SIZE, size);
        PyTuple_SET_ITEM(item, P_BODY, body);
        PyTuple_SET_ITEM(item, P_TRAILER, trailer);
        PyTuple_SET_ITEM(item, P_CRC, crc_masked);
        PyTuple_SET_ITEM(item, P_FLAG, flag);
        PyTuple_SET_ITEM(item, 5, Py_NewRef(sflag));
        PyTuple_SET_ITEM(item, 6, Py_NewRef(born));
        PyTuple_SET_ITEM(item, 7, Py_NewRef(recon));
        PyTuple_SET_ITEM(item, 8, Py_NewRef(zero));
        PyTuple_SET_ITEM(item, P_TAGS_CODE, code);
        PyTuple_SET_ITEM(item, 10, keys);
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

static PyMethodDef speedups_methods[] = {
    {"prepare", speedups_prepare, METH_VARARGS, prepare_doc},
    {"pack", speedups_pack, METH_VARARGS, pack_doc},
    {"units", speedups_units, METH_VARARGS, units_doc},
    {"put_results", speedups_put_results, METH_VARARGS, put_results_doc},
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
