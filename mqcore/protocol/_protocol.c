/*
 * mqcore.protocol._protocol: the per-message loops of the send protocol, in C.
 *
 * sent_prefix() runs the broker's checks of a sent batch over its plain messages
 * (mqcore.validation.py_sent_prefix is the reference); decode_batch() and
 * encode_batch() read and write a SEND_BATCH_MESSAGE body (mqcore.protocol.send). Optional:
 * without it the Python code serves, and the tests hold both to the same results.
 */
#define SPEEDUPS_MESSAGE_FIELDS
#include "speedups.h"

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



/* --- message_from_wire: one sent message (SEND_MESSAGE / SEND_MESSAGE_V2) ----------------- */

PyDoc_STRVAR(message_from_wire_doc,
"message_from_wire(topic, body, flag, properties, new_message, defaults, fallback) -> Message\n\n"
"The Message of a single send: mqcore.protocol.send.py_message_from_wire is the reference.\n"
"Properties are split in C; a message whose properties hold TAGS, KEYS or DELAY, or whose\n"
"properties are not UTF-8 encodable, is made by fallback(topic, body, flag, properties).");

static PyObject *speedups_message_from_wire(PyObject *self, PyObject *args)
{
    PyObject *topic, *body, *flag, *properties, *new_message, *defaults, *fallback;
    if (!PyArg_ParseTuple(args, "UO!O!OOO!O:message_from_wire", &topic, &PyBytes_Type, &body,
                          &PyLong_Type, &flag, &properties, &new_message, &PyTuple_Type,
                          &defaults, &fallback))
        return NULL;
    const char *props = "";
    Py_ssize_t props_len = 0;
    if (properties != Py_None) {
        if (!PyUnicode_CheckExact(properties))
            goto reference;
        props = PyUnicode_AsUTF8AndSize(properties, &props_len);
        if (props == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
                return NULL;
            PyErr_Clear();
            goto reference;
        }
    }
    int field = 0;
    PyObject *dict = batch_properties(props, props_len, &field);
    if (dict == NULL)
        return NULL;
    if (field) {
        Py_DECREF(dict);
        goto reference;
    }
    PyObject *zero = PyLong_FromLong(0);
    PyObject *msg = zero == NULL ? NULL : PyObject_CallNoArgs(new_message);
    int bad = msg == NULL ||
              PyObject_GenericSetAttr(msg, s_topic, topic) < 0 ||
              PyObject_GenericSetAttr(msg, s_body, body) < 0 ||
              PyObject_GenericSetAttr(msg, s_tags, Py_None) < 0 ||
              PyObject_GenericSetAttr(msg, s_keys, Py_None) < 0 ||
              PyObject_GenericSetAttr(msg, s_properties, dict) < 0 ||
              PyObject_GenericSetAttr(msg, s_flag, flag) < 0 ||
              PyObject_GenericSetAttr(msg, s_delay_level, zero) < 0;
    for (Py_ssize_t i = 0; !bad && i < PyTuple_GET_SIZE(defaults); i++) {
        PyObject *pair = PyTuple_GET_ITEM(defaults, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError,
                            "message_from_wire: defaults are (name, value) pairs");
            bad = 1;
            break;
        }
        bad = PyObject_GenericSetAttr(msg, PyTuple_GET_ITEM(pair, 0),
                                      PyTuple_GET_ITEM(pair, 1)) < 0;
    }
    Py_XDECREF(zero);
    Py_DECREF(dict);
    if (bad) {
        Py_XDECREF(msg);
        return NULL;
    }
    return msg;
reference:
    return PyObject_CallFunctionObjArgs(fallback, topic, body, flag, properties, NULL);
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


/* --- custom headers read from extFields (mqcore.protocol.fields) ------------------------ */

enum { KIND_STRING, KIND_INT, KIND_LONG, KIND_BOOLEAN };

/* A decimal int of ASCII digits with an optional minus and at most 19 digits (what every
 * client writes): 1 with *out set, else 0 (the reference reads anything else). */
static int plain_decimal(PyObject *s, long long *out)
{
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(s) < 0) {
        PyErr_Clear();
        return 0;
    }
#endif
    if (!PyUnicode_IS_ASCII(s))
        return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    const char *p = (const char *)PyUnicode_1BYTE_DATA(s);
    Py_ssize_t i = 0;
    int neg = 0;
    if (n > 0 && p[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i == n || n - i > 19) /* 19 digits fit uint64 */
        return 0;
    unsigned long long v = 0;
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return 0;
        v = v * 10 + (unsigned long long)(p[i] - '0');
    }
    if (neg ? v > (unsigned long long)LLONG_MAX + 1 : v > (unsigned long long)LLONG_MAX)
        return 0; /* past a Java long: the reference words the refusal */
    *out = neg ? (long long)(0 - v) : (long long)v;
    return 1;
}

/* read_fields(ext, plan) -> dict | None: the keyword arguments of a header read from the
 * extFields dict ``ext`` by ``plan``, a tuple of (wire name, attribute, kind, required) per
 * field (kind: 0 String, 1 Integer, 2 Long, 3 Boolean). None when a field needs the
 * reference (CommandHeader's generated reader): absent but required, or a value not in the
 * plain shape (a decimal string, an exact int in range, "true"/"false", a str). */
static PyObject *read_plan(PyObject *ext, PyObject *plan);

static PyObject *read_fields(PyObject *self, PyObject *args)
{
    PyObject *ext, *plan;
    if (!PyArg_ParseTuple(args, "O!O!:read_fields", &PyDict_Type, &ext, &PyTuple_Type, &plan))
        return NULL;
    return read_plan(ext, plan);
}

/* read_fields' reading: a new dict, Py_None (a new reference) to punt, NULL on error. */
static PyObject *read_plan(PyObject *ext, PyObject *plan)
{
    PyObject *kw = PyDict_New();
    if (kw == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(plan);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *spec = PyTuple_GET_ITEM(plan, i);
        if (!PyTuple_CheckExact(spec) || PyTuple_GET_SIZE(spec) != 4) {
            PyErr_SetString(PyExc_TypeError, "read_fields: a plan entry must be a 4-tuple");
            goto fail;
        }
        PyObject *wire = PyTuple_GET_ITEM(spec, 0), *attr = PyTuple_GET_ITEM(spec, 1);
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(spec, 2));
        int required = PyObject_IsTrue(PyTuple_GET_ITEM(spec, 3));
        if ((kind == -1 || required < 0) && PyErr_Occurred())
            goto fail;
        PyObject *raw = PyDict_GetItemWithError(ext, wire); /* borrowed */
        if (raw == NULL && PyErr_Occurred())
            goto fail;
        if (raw == NULL || raw == Py_None ||
            (kind != KIND_STRING && PyUnicode_CheckExact(raw) && PyUnicode_GET_LENGTH(raw) == 0)) {
            if (required)
                goto punt;
            continue;
        }
        PyObject *value = NULL;
        if (kind == KIND_STRING) {
            if (!PyUnicode_CheckExact(raw))
                goto punt;
            value = raw;
            Py_INCREF(value);
        } else if (kind == KIND_INT || kind == KIND_LONG) {
            long long v;
            if (PyUnicode_CheckExact(raw)) {
                if (!plain_decimal(raw, &v))
                    goto punt;
            } else if (PyLong_CheckExact(raw)) {
                int overflow;
                v = PyLong_AsLongLongAndOverflow(raw, &overflow);
                if (overflow)
                    goto punt;
                if (v == -1 && PyErr_Occurred())
                    goto fail;
            } else {
                goto punt;
            }
            if (kind == KIND_INT && (v < INT32_MIN || v > INT32_MAX))
                goto punt;
            value = PyLong_FromLongLong(v);
        } else {
            if (raw == Py_True || raw == Py_False) {
                value = raw;
                Py_INCREF(value);
            } else if (PyUnicode_CheckExact(raw)) {
                if (PyUnicode_CompareWithASCIIString(raw, "true") == 0)
                    value = Py_True;
                else if (PyUnicode_CompareWithASCIIString(raw, "false") == 0)
                    value = Py_False;
                else
                    goto punt;
                Py_INCREF(value);
            } else {
                goto punt;
            }
        }
        if (value == NULL)
            goto fail;
        int rc = PyDict_SetItem(kw, attr, value);
        Py_DECREF(value);
        if (rc < 0)
            goto fail;
    }
    return kw;
punt:
    Py_DECREF(kw);
    Py_RETURN_NONE;
fail:
    Py_DECREF(kw);
    return NULL;
}

/* --- a sent batch straight to prepared records (mqcore.batch.prepare_sent_batch) ---------- */

PyDoc_STRVAR(prepare_sent_batch_doc,
"prepare_sent_batch(topic_head, data, limit, born_timestamp, reconsume_times, sys_flag,\n"
"                   header_size, crc32, special) -> (prepared, uniqs) or None\n\n"
"The prepared records of a SEND_BATCH_MESSAGE body whose messages are all plain, and their\n"
"UNIQ_KEYs; None for any other body (mqcore.batch.py_prepare_sent_batch is the reference).");

#define SENT_MAX_PROPERTIES 64

typedef struct {
    const char *name;
    Py_ssize_t name_len;
    const char *item; /* name\x01value */
    Py_ssize_t item_len;
} sent_pair;

/* The pairs of one message's properties, or -1 when they are not plain (see the doc). */
static Py_ssize_t sent_pairs(const char *p, Py_ssize_t n, PyObject *special, sent_pair *pairs)
{
    Py_ssize_t count = 0, start = 0;
    if (n == 0)
        return 0;
    if (p[n - 1] != '\x02')
        return -1;
    for (Py_ssize_t i = 0; i < n; i++)
        if ((unsigned char)p[i] >= 0x80)
            return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] != '\x02')
            continue;
        const char *item = p + start;
        Py_ssize_t len = i - start;
        start = i + 1;
        const char *sep = memchr(item, '\x01', (size_t)len);
        if (sep == NULL || sep == item || count == SENT_MAX_PROPERTIES ||
            memchr(sep + 1, '\x01', (size_t)(item + len - sep - 1)) != NULL)
            return -1;
        Py_ssize_t name_len = sep - item;
        for (Py_ssize_t j = 0; j < count; j++)
            if (pairs[j].name_len == name_len && memcmp(pairs[j].name, item, (size_t)name_len) == 0)
                return -1;
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(special); j++) {
            PyObject *s = PyTuple_GET_ITEM(special, j);
            if (PyBytes_GET_SIZE(s) == name_len &&
                memcmp(PyBytes_AS_STRING(s), item, (size_t)name_len) == 0)
                return -1;
        }
        pairs[count].name = item;
        pairs[count].name_len = name_len;
        pairs[count].item = item;
        pairs[count].item_len = len;
        count++;
    }
    return count;
}

/* One sent message's prepared record (the tuple mqcore.codec.prepare makes), with its UNIQ_KEY
 * (a new reference, None when it has none) in *uniq_out; Py_None (a new reference) when the
 * message is not plain (see prepare_sent_batch's doc); NULL on error. */
static PyObject *sent_record(const char *head, Py_ssize_t head_len, const char *body_p,
                             Py_ssize_t body_len, const char *props, Py_ssize_t props_len,
                             long flag, long long limit, PyObject *born, PyObject *reconsume,
                             PyObject *sys_flag, long long header_size, PyObject *crc32,
                             PyObject *special, PyObject **uniq_out)
{
    sent_pair pairs[SENT_MAX_PROPERTIES];
    *uniq_out = NULL;
    if (body_len == 0 || body_len > limit)
        Py_RETURN_NONE;
    Py_ssize_t count = sent_pairs(props, props_len, special, pairs);
    if (count < 0)
        Py_RETURN_NONE;
    const sent_pair *tags = NULL, *keys = NULL, *uniq = NULL;
    Py_ssize_t text_len = 0;
    for (Py_ssize_t j = 0; j < count; j++) {
        const sent_pair *q = &pairs[j];
        if (q->name_len == 4 && memcmp(q->name, "TAGS", 4) == 0)
            tags = q;
        else if (q->name_len == 4 && memcmp(q->name, "KEYS", 4) == 0)
            keys = q;
        else {
            if (q->name_len == 8 && memcmp(q->name, "UNIQ_KEY", 8) == 0)
                uniq = q;
            text_len += q->item_len + 1;
        }
    }
    /* an empty tag or key is no field: the record leaves it out */
    if (tags != NULL && tags->item_len == 5)
        tags = NULL;
    if (keys != NULL && keys->item_len == 5)
        keys = NULL;
    if (tags != NULL)
        text_len += tags->item_len + 1;
    if (keys != NULL)
        text_len += keys->item_len + 1;
    PyObject *trailer = PyBytes_FromStringAndSize(NULL, head_len + 2 + text_len);
    if (trailer == NULL)
        return NULL;
    char *t = PyBytes_AS_STRING(trailer);
    memcpy(t, head, (size_t)head_len);
    t += head_len;
    *t++ = (char)((text_len >> 8) & 0xFF);
    *t++ = (char)(text_len & 0xFF);
    for (Py_ssize_t j = 0; j < count; j++) {
        const sent_pair *q = &pairs[j];
        if (q == tags || q == keys ||
            (q->name_len == 4 && (memcmp(q->name, "TAGS", 4) == 0 || memcmp(q->name, "KEYS", 4) == 0)))
            continue;
        memcpy(t, q->item, (size_t)q->item_len);
        t += q->item_len;
        *t++ = '\x02';
    }
    if (tags != NULL) {
        memcpy(t, tags->item, (size_t)tags->item_len);
        t += tags->item_len;
        *t++ = '\x02';
    }
    if (keys != NULL) {
        memcpy(t, keys->item, (size_t)keys->item_len);
        t += keys->item_len;
        *t++ = '\x02';
    }
    PyObject *body = PyBytes_FromStringAndSize(body_p, body_len);
    PyObject *crc = body == NULL ? NULL : PyObject_CallOneArg(crc32, body);
    unsigned long crc_value = crc == NULL ? 0 : PyLong_AsUnsignedLongMask(crc);
    Py_XDECREF(crc);
    PyObject *item = NULL;
    if (crc != NULL && !(crc_value == (unsigned long)-1 && PyErr_Occurred()))
        item = PyTuple_New(11);
    PyObject *keys_obj = NULL;
    if (item != NULL) {
        if (keys != NULL)
            keys_obj = PyUnicode_DecodeASCII(keys->item + 5, keys->item_len - 5, "strict");
        else {
            keys_obj = Py_None;
            Py_INCREF(Py_None);
        }
    }
    PyObject *zero = item ? PyLong_FromLong(0) : NULL;
    PyObject *fields[11] = {
        PyLong_FromLongLong(header_size + body_len + head_len + 2 + text_len),
        body,
        trailer,
        item ? PyLong_FromUnsignedLong(crc_value & 0x7FFFFFFFUL) : NULL,
        item ? PyLong_FromLong(flag) : NULL,
        sys_flag,
        born,
        reconsume,
        zero,
        item ? PyLong_FromLong(tags ? java_hash((const unsigned char *)tags->item + 5,
                                                tags->item_len - 5)
                                    : 0)
             : NULL,
        keys_obj,
    };
    int bad = item == NULL;
    for (int f = 0; f < 11; f++) {
        if (fields[f] == NULL) {
            bad = 1;
            continue;
        }
        if (f >= 5 && f <= 7)
            Py_INCREF(fields[f]); /* the borrowed ones */
        if (item != NULL)
            PyTuple_SET_ITEM(item, f, fields[f]);
        else
            Py_DECREF(fields[f]);
    }
    if (bad) {
        Py_XDECREF(item);
        return NULL;
    }
    PyObject *uniq_obj = uniq == NULL ? Py_None
                                      : PyUnicode_DecodeASCII(uniq->item + 9, uniq->item_len - 9,
                                                              "strict");
    if (uniq_obj == NULL) {
        Py_DECREF(item);
        return NULL;
    }
    if (uniq == NULL)
        Py_INCREF(Py_None);
    *uniq_out = uniq_obj;
    return item;
}

static PyObject *speedups_prepare_sent_batch(PyObject *self, PyObject *args)
{
    const char *head;
    Py_ssize_t head_len;
    PyObject *data, *born, *reconsume, *sys_flag, *crc32, *special;
    long long limit, header_size;
    if (!PyArg_ParseTuple(args, "y#OLOOOLOO!", &head, &head_len, &data, &limit, &born,
                          &reconsume, &sys_flag, &header_size, &crc32, &PyTuple_Type, &special))
        return NULL;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(special); j++)
        if (!PyBytes_CheckExact(PyTuple_GET_ITEM(special, j))) {
            PyErr_SetString(PyExc_TypeError, "prepare_sent_batch: special names are bytes");
            return NULL;
        }
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t pos = 0, end = view.len;
    PyObject *out = PyList_New(0), *uniqs = PyList_New(0);
    PyObject *result = NULL;
    if (out == NULL || uniqs == NULL)
        goto done;
    while (pos < end) {
        if (end - pos < 22)
            goto punt;
        int32_t size = (int32_t)get_be32(buf + pos);
        int32_t flag = (int32_t)get_be32(buf + pos + 12);
        int32_t body_len = (int32_t)get_be32(buf + pos + 16);
        Py_ssize_t body_at = pos + 20;
        Py_ssize_t props_at = body_at + body_len;
        if (body_len < 0 || size < 22 || props_at + 2 > end)
            goto punt;
        int16_t props_len = (int16_t)(((unsigned)buf[props_at] << 8) | buf[props_at + 1]);
        Py_ssize_t stop = props_at + 2 + props_len;
        if (props_len < 0 || stop != pos + size || stop > end)
            goto punt;
        PyObject *uniq_obj;
        PyObject *item = sent_record(head, head_len, (const char *)buf + body_at, body_len,
                                     (const char *)buf + props_at + 2, props_len, flag, limit,
                                     born, reconsume, sys_flag, header_size, crc32, special,
                                     &uniq_obj);
        if (item == NULL)
            goto done;
        if (item == Py_None) {
            Py_DECREF(item);
            goto punt;
        }
        int appended = PyList_Append(out, item);
        Py_DECREF(item);
        if (appended == 0)
            appended = PyList_Append(uniqs, uniq_obj);
        Py_DECREF(uniq_obj);
        if (appended < 0)
            goto done;
        pos = stop;
    }
    if (PyList_GET_SIZE(out) == 0)
        goto punt;
    result = PyTuple_Pack(2, out, uniqs);
    goto done;
punt:
    result = Py_None;
    Py_INCREF(Py_None);
done:
    Py_XDECREF(out);
    Py_XDECREF(uniqs);
    PyBuffer_Release(&view);
    return result;
}

/* --- a single send straight to a prepared record (mqcore.server.sendlane) ------------------ */

PyDoc_STRVAR(prepare_sent_single_doc,
"prepare_sent_single(topic, body, properties, flag, limit, born_timestamp, reconsume_times,\n"
"                    sys_flag, header_size, crc32, special) -> (prepared, uniq) or None\n\n"
"The prepared record of a plain single send (its header's fields and its body) and its\n"
"UNIQ_KEY; None for any other send (mqcore.server.sendlane.py_prepare_sent_single is the\n"
"reference).");

static PyObject *single_prepared(PyObject *topic, PyObject *body, PyObject *props,
                                 PyObject *flag_obj, long long limit, PyObject *born,
                                 PyObject *reconsume, PyObject *sys_flag, long long header_size,
                                 PyObject *crc32, PyObject *special);

static PyObject *speedups_prepare_sent_single(PyObject *self, PyObject *args)
{
    PyObject *topic, *body, *props, *flag_obj, *born, *reconsume, *sys_flag, *crc32, *special;
    long long limit, header_size;
    if (!PyArg_ParseTuple(args, "UOOOLOOOLOO!", &topic, &body, &props, &flag_obj, &limit, &born,
                          &reconsume, &sys_flag, &header_size, &crc32, &PyTuple_Type, &special))
        return NULL;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(special); j++)
        if (!PyBytes_CheckExact(PyTuple_GET_ITEM(special, j))) {
            PyErr_SetString(PyExc_TypeError, "prepare_sent_single: special names are bytes");
            return NULL;
        }
    return single_prepared(topic, body, props, flag_obj, limit, born, reconsume, sys_flag,
                           header_size, crc32, special);
}

/* prepare_sent_single past its arguments' parsing (``special`` checked to hold bytes). */
static PyObject *single_prepared(PyObject *topic, PyObject *body, PyObject *props,
                                 PyObject *flag_obj, long long limit, PyObject *born,
                                 PyObject *reconsume, PyObject *sys_flag, long long header_size,
                                 PyObject *crc32, PyObject *special)
{
    /* A valid topic is ASCII; anything else is the reference path's to refuse. */
    Py_ssize_t name_len = PyUnicode_GET_LENGTH(topic);
    if (!PyUnicode_IS_ASCII(topic) || name_len < 1 || name_len > 127)
        Py_RETURN_NONE;
    const char *text = "";
    Py_ssize_t text_len = 0;
    if (props != Py_None) {
        if (!PyUnicode_CheckExact(props) || !PyUnicode_IS_ASCII(props))
            Py_RETURN_NONE;
        text = (const char *)PyUnicode_DATA(props);
        text_len = PyUnicode_GET_LENGTH(props);
        if (text_len > 0x7FFF) /* a batch message's properties length is a signed short */
            Py_RETURN_NONE;
    }
    int overflow = 0;
    long long flag = PyLong_Check(flag_obj) ? PyLong_AsLongLongAndOverflow(flag_obj, &overflow)
                                            : 0;
    if (!PyLong_Check(flag_obj) || overflow || flag < INT32_MIN || flag > INT32_MAX) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    char head[128];
    head[0] = (char)name_len;
    memcpy(head + 1, PyUnicode_DATA(topic), (size_t)name_len);
    Py_buffer view;
    if (PyObject_GetBuffer(body, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *uniq;
    PyObject *item = sent_record(head, name_len + 1, (const char *)view.buf, view.len, text,
                                 text_len, (long)flag, limit, born, reconsume, sys_flag,
                                 header_size, crc32, special, &uniq);
    PyBuffer_Release(&view);
    if (item == NULL || item == Py_None)
        return item;
    PyObject *result = PyTuple_Pack(2, item, uniq);
    Py_DECREF(item);
    Py_DECREF(uniq);
    return result;
}


/* --- the plain single sends of one wake-up straight to prepared sends (sendlane) ---------- */

PyDoc_STRVAR(prepare_sent_group_doc,
"prepare_sent_group(items, limit, kept, timer_topic, header_size, crc32, special, cls)\n"
"    -> list\n\n"
"For each (ext, body, plan, born_host) of ``items`` (a single send's extFields, its body,\n"
"its header's read_fields plan, the sender's born host): cls(topic, queue_id, record, uniq,\n"
"born_host) when the send is plain, None when the general path serves it\n"
"(mqcore.server.sendlane.py_prepare_sent_group is the reference).");

static PyObject *name_topic, *name_queue_id, *name_properties, *name_flag, *name_born,
    *name_reconsume, *name_sys_flag, *name_batch, *long_zero;

static int group_names(void)
{
    if ((name_topic = PyUnicode_InternFromString("topic")) == NULL ||
        (name_queue_id = PyUnicode_InternFromString("queue_id")) == NULL ||
        (name_properties = PyUnicode_InternFromString("properties")) == NULL ||
        (name_flag = PyUnicode_InternFromString("flag")) == NULL ||
        (name_born = PyUnicode_InternFromString("born_timestamp")) == NULL ||
        (name_reconsume = PyUnicode_InternFromString("reconsume_times")) == NULL ||
        (name_sys_flag = PyUnicode_InternFromString("sys_flag")) == NULL ||
        (name_batch = PyUnicode_InternFromString("batch")) == NULL ||
        (long_zero = PyLong_FromLong(0)) == NULL)
        return -1;
    return 0;
}

/* One item of prepare_sent_group: a new reference to its cls(...) or to None; NULL on error. */
static PyObject *group_one(PyObject *entry, long long limit, PyObject *kept,
                           PyObject *timer_topic, long long header_size, PyObject *crc32,
                           PyObject *special, PyObject *cls)
{
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 4) {
        PyErr_SetString(PyExc_TypeError,
                        "prepare_sent_group: an item is (ext, body, plan, born_host)");
        return NULL;
    }
    PyObject *ext = PyTuple_GET_ITEM(entry, 0), *body = PyTuple_GET_ITEM(entry, 1),
             *plan = PyTuple_GET_ITEM(entry, 2), *host = PyTuple_GET_ITEM(entry, 3);
    if (!PyDict_CheckExact(ext) || !PyTuple_CheckExact(plan))
        Py_RETURN_NONE;
    /* No body (None or empty): the general path refuses it with its own error. */
    if (body == Py_None)
        Py_RETURN_NONE;
    int has = PyObject_IsTrue(body);
    if (has <= 0)
        return has < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *fields = read_plan(ext, plan);
    if (fields == NULL || fields == Py_None)
        return fields;
    PyObject *result = NULL, *flags = NULL;
    PyObject *topic = PyDict_GetItemWithError(fields, name_topic);
    PyObject *queue_id = topic ? PyDict_GetItemWithError(fields, name_queue_id) : NULL;
    PyObject *flag = queue_id ? PyDict_GetItemWithError(fields, name_flag) : NULL;
    PyObject *born = flag ? PyDict_GetItemWithError(fields, name_born) : NULL;
    PyObject *sys_flag = born ? PyDict_GetItemWithError(fields, name_sys_flag) : NULL;
    if (sys_flag == NULL) {
        if (!PyErr_Occurred())
            result = Py_NewRef(Py_None); /* a plan without these fields: not a send's */
        goto end;
    }
    PyObject *batch = PyDict_GetItemWithError(fields, name_batch);
    if (batch == NULL && PyErr_Occurred())
        goto end;
    if (batch != NULL) {
        int is_batch = PyObject_IsTrue(batch);
        if (is_batch != 0) {
            if (is_batch > 0)
                result = Py_NewRef(Py_None);
            goto end;
        }
    }
    if (!PyUnicode_CheckExact(topic) || !PyLong_CheckExact(queue_id)) {
        result = Py_NewRef(Py_None);
        goto end;
    }
    /* Any queue asked for, a retry or DLQ topic, the timer topic: the broker's own handling. */
    int overflow = 0;
    long long qid = PyLong_AsLongLongAndOverflow(queue_id, &overflow);
    if (qid == -1 && PyErr_Occurred())
        goto end;
    if (overflow || qid < 0 ||
        (PyUnicode_GET_LENGTH(topic) > 0 && PyUnicode_READ_CHAR(topic, 0) == '%')) {
        result = Py_NewRef(Py_None);
        goto end;
    }
    int timer = PyUnicode_Compare(topic, timer_topic);
    if (timer == -1 && PyErr_Occurred())
        goto end;
    if (timer == 0) {
        result = Py_NewRef(Py_None);
        goto end;
    }
    PyObject *props = PyDict_GetItemWithError(fields, name_properties);
    PyObject *reconsume = props || !PyErr_Occurred()
                              ? PyDict_GetItemWithError(fields, name_reconsume)
                              : NULL;
    if (PyErr_Occurred())
        goto end;
    if (reconsume == NULL || reconsume == Py_None)
        reconsume = long_zero;
    else {
        int truth = PyObject_IsTrue(reconsume);
        if (truth < 0)
            goto end;
        if (!truth)
            reconsume = long_zero;
    }
    flags = PyNumber_And(sys_flag, kept);
    if (flags == NULL)
        goto end;
    PyObject *got = single_prepared(topic, body, props ? props : Py_None, flag, limit, born,
                                    reconsume, flags, header_size, crc32, special);
    if (got == NULL || got == Py_None) {
        result = got;
        goto end;
    }
    result = PyObject_CallFunctionObjArgs(cls, topic, queue_id, PyTuple_GET_ITEM(got, 0),
                                          PyTuple_GET_ITEM(got, 1), host, NULL);
    Py_DECREF(got);
end:
    Py_XDECREF(flags);
    Py_DECREF(fields);
    return result;
}

static PyObject *speedups_prepare_sent_group(PyObject *self, PyObject *args)
{
    PyObject *items, *kept, *timer_topic, *crc32, *special, *cls;
    long long limit, header_size;
    if (!PyArg_ParseTuple(args, "O!LOULOO!O:prepare_sent_group", &PyList_Type, &items, &limit,
                          &kept, &timer_topic, &header_size, &crc32, &PyTuple_Type, &special,
                          &cls))
        return NULL;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(special); j++)
        if (!PyBytes_CheckExact(PyTuple_GET_ITEM(special, j))) {
            PyErr_SetString(PyExc_TypeError, "prepare_sent_group: special names are bytes");
            return NULL;
        }
    Py_ssize_t n = PyList_GET_SIZE(items);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *one = group_one(PyList_GET_ITEM(items, i), limit, kept, timer_topic,
                                  header_size, crc32, special, cls);
        if (one == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, one);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"sent_prefix", speedups_sent_prefix, METH_VARARGS, sent_prefix_doc},
    {"decode_batch", speedups_decode_batch, METH_VARARGS, decode_batch_doc},
    {"encode_batch", speedups_encode_batch, METH_VARARGS, encode_batch_doc},
    {"message_from_wire", speedups_message_from_wire, METH_VARARGS, message_from_wire_doc},
    {"prepare_sent_batch", speedups_prepare_sent_batch, METH_VARARGS, prepare_sent_batch_doc},
    {"prepare_sent_single", speedups_prepare_sent_single, METH_VARARGS, prepare_sent_single_doc},
    {"prepare_sent_group", speedups_prepare_sent_group, METH_VARARGS, prepare_sent_group_doc},
    {"read_fields", read_fields, METH_VARARGS,
     "read_fields(ext, plan) -> a header's keyword arguments, or None when the Python reader "
     "must read it (see mqcore.protocol.fields)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "mqcore.protocol._protocol",
    "C versions of the send protocol's batch loops (see mqcore.protocol.send).",
    -1,
    methods,
};

PyMODINIT_FUNC PyInit__protocol(void)
{
    if (intern_field_names() < 0 || group_names() < 0)
        return NULL;
    return PyModule_Create(&module);
}
