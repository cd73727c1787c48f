/*
 * mqcore._codec: the per-message loops of a batch put, in C (the codec speedups).
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
 * mqcore.record.prepared.Prepared: size, body, trailer, crc, flag, sys_flag,
 * born_timestamp, reconsume_times, prepared_offset, tags_code, keys) and validates what
 * it reads, so a malformed item raises instead of writing out of bounds.
 */

#define SPEEDUPS_MESSAGE_FIELDS
#include "speedups.h"

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

/* The 48 header bytes a batch shares: sys flag .. prepared-transaction offset. */

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
    if (as_int32(PyTuple_GET_ITEM(first, P_SYS_FLAG), "sys flag", &sflag) < 0 ||
        as_int64(PyTuple_GET_ITEM(first, P_BORN_TIMESTAMP), "born timestamp", &born) < 0 ||
        as_int32(PyTuple_GET_ITEM(first, P_RECONSUME_TIMES), "reconsume times", &recon) < 0 ||
        as_int64(PyTuple_GET_ITEM(first, P_PREPARED_TRANSACTION_OFFSET), "prepared offset", &ptx) < 0)
        return NULL;
    record_middle(middle, sflag, born, born_ip, born_port, store_ts, store_ip, store_port, recon,
                  ptx);
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
            as_int32(PyTuple_GET_ITEM(item, P_BODY_CRC), "body CRC", &crc) < 0 ||
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
        record_write(p, size, magic, crc, queue_id, flag, queue_offset + i, phys, middle, body,
                     trailer);
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
        put_be64(p + UNIT_POS_OFFSET, (uint64_t)at);
        put_be32(p + UNIT_POS_SIZE, (uint32_t)size);
        put_be64(p + UNIT_POS_TAGS_CODE, (uint64_t)code);
        at += size;
    }
    return Py_BuildValue("NNL", units, offsets, at);
fail:
    Py_XDECREF(units);
    Py_XDECREF(offsets);
    return NULL;
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
        if (qoff == NULL) {
            Py_DECREF(msg_id);
            Py_DECREF(size);
            Py_DECREF(off);
            goto fail;
        }
        PyObject *result = make_result(cls, msg_id, qoff, off, Py_NewRef(ts), size);
        if (result == NULL)
            goto fail;
        PyList_SET_ITEM(out, i, result);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* --- the trailer of a message with properties (codec.message_trailer) ------------------ */

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
    if (topic_s == NULL || topic_len < 1 || topic_len > MAX_TOPIC_LENGTH)
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
    if (total > MAX_PROPERTIES_SIZE)
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

/* --- a send answer's results (mqcore.client.transport_remote) -------------------------- */

PyDoc_STRVAR(answer_results_doc,
"answer_results(cls, joined, queue_offset) -> list | None\n\n"
"The results a send's answer names: ``cls((id, queue_offset + i, offset, 0, 0))`` for\n"
"each comma-separated id of ``joined``, ``offset`` its last 16 hex digits as a signed\n"
"long (what transport_remote.py_put_results builds). None when an id is not 32 ASCII hex\n"
"digits or an offset does not fit a long: the Python reference reads those.");

static int hex_value(Py_UCS1 c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

static PyObject *speedups_answer_results(PyObject *self, PyObject *args)
{
    PyTypeObject *cls;
    PyObject *joined, *qobj;
    if (!PyArg_ParseTuple(args, "O!UO!:answer_results", &PyType_Type, &cls, &joined,
                          &PyLong_Type, &qobj))
        return NULL;
    if (!PyType_IsSubtype(cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "answer_results: cls must be a tuple subclass");
        return NULL;
    }
    int overflow = 0;
    long long queue_offset = PyLong_AsLongLongAndOverflow(qobj, &overflow);
    if (queue_offset == -1 && PyErr_Occurred())
        return NULL;
    if (overflow || !PyUnicode_IS_ASCII(joined))
        Py_RETURN_NONE;
    Py_ssize_t len = PyUnicode_GET_LENGTH(joined);
    const Py_UCS1 *chars = PyUnicode_1BYTE_DATA(joined);
    /* n ids of 32 digits and n - 1 commas, each digit a hex digit: checked before anything
     * is allocated. */
    if ((len + 1) % 33 != 0)
        Py_RETURN_NONE;
    Py_ssize_t n = (len + 1) / 33;
    if (queue_offset > LLONG_MAX - (n - 1)) /* the last one past a long */
        Py_RETURN_NONE;
    for (Py_ssize_t i = 0; i < len; i++) {
        if (i % 33 == 32) {
            if (chars[i] != ',')
                Py_RETURN_NONE;
        }
        else if (hex_value(chars[i]) < 0) {
            Py_RETURN_NONE;
        }
    }
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    PyObject *zero = PyLong_FromLong(0);
    if (zero == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Py_UCS1 *id = chars + 33 * i;
        uint64_t u = 0;
        for (int k = 16; k < 32; k++)
            u = (u << 4) | (uint64_t)hex_value(id[k]);
        PyObject *msg_id = PyUnicode_New(32, 127);
        if (msg_id == NULL)
            goto fail;
        memcpy(PyUnicode_1BYTE_DATA(msg_id), id, 32);
        PyObject *qoff = PyLong_FromLongLong(queue_offset + i);
        PyObject *off = qoff ? PyLong_FromLongLong((long long)(int64_t)u) : NULL;
        if (off == NULL) {
            Py_DECREF(msg_id);
            Py_XDECREF(qoff);
            goto fail;
        }
        PyObject *result =
            make_result(cls, msg_id, qoff, off, Py_NewRef(zero), Py_NewRef(zero));
        if (result == NULL)
            goto fail;
        PyList_SET_ITEM(out, i, result);
    }
    Py_DECREF(zero);
    return out;
fail:
    Py_XDECREF(zero);
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"prepare", speedups_prepare, METH_VARARGS, prepare_doc},
    {"pack", speedups_pack, METH_VARARGS, pack_doc},
    {"units", speedups_units, METH_VARARGS, units_doc},
    {"put_results", speedups_put_results, METH_VARARGS, put_results_doc},
    {"answer_results", speedups_answer_results, METH_VARARGS, answer_results_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "mqcore._codec",
    "C versions of the per-message loops of a batch put (see mqcore.codec, mqcore.batch).",
    -1,
    methods,
};

PyMODINIT_FUNC PyInit__codec(void)
{
    if (intern_field_names() < 0)
        return NULL;
    return PyModule_Create(&module);
}
