/*
 * Helpers shared by mqcore's optional C extensions (one per owner: mqcore._codec,
 * mqcore.protocol._protocol, mqcore.broker._schedule, mqcore.plugins._delay_timer,
 * mqcore.contrib.spark._arrow), each built from its own source beside its Python reference.
 *
 * Everything here is static: each extension compiles the helpers it uses. The record and
 * queue layout they read and write is mqcore/record/record.h. An extension that reads
 * mqcore.Message fields defines SPEEDUPS_MESSAGE_FIELDS before including this file, and
 * calls intern_field_names() when its module is created.
 */
#ifndef MQCORE_SPEEDUPS_H
#define MQCORE_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <limits.h>
#include <stdarg.h>
#include <string.h>
#include <structmember.h>

#include "record/record.h"

#define FAST_PROPERTIES 16 /* more than this: the Python code encodes a message's properties */

/* Fill a fresh P_FIELDS tuple as a Prepared record (mqcore.codec.Prepared's layout: size,
 * body, trailer, masked CRC, flag, sys flag, born timestamp, reconsume times, prepared
 * transaction offset, tags code, keys). Steals every reference. */
static inline void
fill_prepared(PyObject *item, PyObject *size, PyObject *body, PyObject *trailer, PyObject *crc,
              PyObject *flag, PyObject *sflag, PyObject *born, PyObject *recon, PyObject *prep,
              PyObject *code, PyObject *keys)
{
    PyTuple_SET_ITEM(item, P_SIZE, size);
    PyTuple_SET_ITEM(item, P_BODY, body);
    PyTuple_SET_ITEM(item, P_TRAILER, trailer);
    PyTuple_SET_ITEM(item, P_BODY_CRC, crc);
    PyTuple_SET_ITEM(item, P_FLAG, flag);
    PyTuple_SET_ITEM(item, P_SYS_FLAG, sflag);
    PyTuple_SET_ITEM(item, P_BORN_TIMESTAMP, born);
    PyTuple_SET_ITEM(item, P_RECONSUME_TIMES, recon);
    PyTuple_SET_ITEM(item, P_PREPARED_TRANSACTION_OFFSET, prep);
    PyTuple_SET_ITEM(item, P_TAGS_CODE, code);
    PyTuple_SET_ITEM(item, P_KEYS, keys);
}

static inline void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void put_be64(unsigned char *p, uint64_t v)
{
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

/* --- writing records (codec.pack and the mmap store's one-call put) --- */

/* The header bytes from the sys flag to the prepared offset: the same for every record of
 * one prepare() call, so written once and copied into each record. */
#define MIDDLE_SIZE (POS_BODY_LENGTH - POS_SYS_FLAG)

static inline void record_middle(unsigned char *middle, int32_t sflag, int64_t born,
                                 const char *born_ip, int32_t born_port, int64_t store_ts,
                                 const char *store_ip, int32_t store_port, int32_t recon,
                                 int64_t ptx)
{
#define M(pos) (middle + (pos) - POS_SYS_FLAG) /* where a header field lies in the middle */
    put_be32(M(POS_SYS_FLAG), (uint32_t)sflag);
    put_be64(M(POS_BORN_TIMESTAMP), (uint64_t)born);
    memcpy(M(POS_BORN_HOST), born_ip, 4);
    put_be32(M(POS_BORN_HOST + 4), (uint32_t)born_port);
    put_be64(M(POS_STORE_TIMESTAMP), (uint64_t)store_ts);
    memcpy(M(POS_STORE_HOST), store_ip, 4);
    put_be32(M(POS_STORE_HOST + 4), (uint32_t)store_port);
    put_be32(M(POS_RECONSUME_TIMES), (uint32_t)recon);
    put_be64(M(POS_PREPARED_TRANSACTION_OFFSET), (uint64_t)ptx);
#undef M
}

/* One record at ``p`` (``size`` bytes, checked by the caller): its header, the shared
 * ``middle``, the body and the trailer (both bytes objects). */
static inline void record_write(unsigned char *p, Py_ssize_t size, int32_t magic, int32_t crc,
                                int32_t queue_id, int32_t flag, int64_t queue_offset,
                                int64_t phys, const unsigned char *middle, PyObject *body,
                                PyObject *trailer)
{
    Py_ssize_t body_len = PyBytes_GET_SIZE(body);
    put_be32(p + POS_TOTAL_SIZE, (uint32_t)size);
    put_be32(p + POS_MAGIC_CODE, (uint32_t)magic);
    put_be32(p + POS_BODY_CRC, (uint32_t)crc);
    put_be32(p + POS_QUEUE_ID, (uint32_t)queue_id);
    put_be32(p + POS_FLAG, (uint32_t)flag);
    put_be64(p + POS_QUEUE_OFFSET, (uint64_t)queue_offset);
    put_be64(p + POS_PHYSICAL_OFFSET, (uint64_t)phys);
    memcpy(p + POS_SYS_FLAG, middle, MIDDLE_SIZE);
    put_be32(p + POS_BODY_LENGTH, (uint32_t)body_len);
    memcpy(p + HEADER_SIZE, PyBytes_AS_STRING(body), (size_t)body_len);
    memcpy(p + HEADER_SIZE + body_len, PyBytes_AS_STRING(trailer),
           (size_t)PyBytes_GET_SIZE(trailer));
}

/* Every int these loops read must be an int object: converting anything else would call
 * its __index__, Python code that could change the lists being read. */
static inline int check_int(PyObject *obj, const char *what)
{
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    return 0;
}

static inline int as_int64(PyObject *obj, const char *what, int64_t *out)
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
static inline int as_int32(PyObject *obj, const char *what, int32_t *out)
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

static inline uint32_t get_be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t get_be64(const unsigned char *p)
{
    return ((uint64_t)get_be32(p) << 32) | get_be32(p + 4);
}

/* Whether ``s[0:n]`` is UTF-8 that Python's strict decoder accepts (no surrogates, no
 * overlong forms, nothing above U+10FFFF). */
static inline int utf8_ok(const unsigned char *s, Py_ssize_t n)
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

/* Java's String.hashCode of UTF-8 text (over its UTF-16 code units), as a signed int. */
static inline int32_t java_hash(const unsigned char *s, Py_ssize_t n)
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

/* UTF-8 of an exact str (borrowed, cached in the object), or NULL without an error set when
 * it is not an exact str or cannot be encoded (a lone surrogate): the Python code then
 * encodes it, and raises what it raises. */
static inline const char *utf8_of(PyObject *obj, Py_ssize_t *len)
{
    if (!PyUnicode_CheckExact(obj))
        return NULL;
    const char *s = PyUnicode_AsUTF8AndSize(obj, len);
    if (s == NULL)
        PyErr_Clear();
    return s;
}

/* ``text`` as a timer deliver time (1..18 ASCII digits), or -1. */
static inline long long deliver_digits(const char *text, Py_ssize_t n)
{
    if (n < 1 || n > MAX_DELIVER_DIGITS)
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
static inline char *put_property_text(char *p, const char *const *text, const Py_ssize_t *lens,
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

#ifdef SPEEDUPS_MESSAGE_FIELDS

/* --- a message's fields without a getattr each ---------------------------------------- */

/* Interned attribute names of mqcore.Message, created when the module is. */
static PyObject *s_body, *s_properties, *s_tags, *s_keys, *s_topic, *s_delay_level, *s_flag;

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

static inline int fields_cached(PyTypeObject *type)
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
static inline PyObject *get_field(PyObject *m, int f)
{
    if (fields_cached(Py_TYPE(m))) {
        PyObject *v = *(PyObject **)((char *)m + fields_offset[f]);
        if (v != NULL)
            return Py_NewRef(v);
    }
    return PyObject_GetAttr(m, *field_names[f]);
}

/* Intern the field names (once per extension): 0, or -1 with an exception. */
static inline int intern_field_names(void)
{
    struct {
        PyObject **slot;
        const char *name;
    } names[] = {
        {&s_body, "body"},   {&s_properties, "properties"}, {&s_tags, "tags"},
        {&s_keys, "keys"},   {&s_topic, "topic"},           {&s_delay_level, "delay_level"},
        {&s_flag, "flag"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (*names[i].slot == NULL &&
            (*names[i].slot = PyUnicode_InternFromString(names[i].name)) == NULL)
            return -1;
    return 0;
}

#endif /* SPEEDUPS_MESSAGE_FIELDS */

/* The PutResult-like 5-tuple of type ``cls`` holding the five values, each a reference it
 * steals (released when it fails). Tuples cache their hash from 3.14 on: there it is built
 * through tuple.__new__, which sets the cache up, rather than by filling a raw allocation. */
static inline PyObject *
make_result(PyTypeObject *cls, PyObject *a, PyObject *b, PyObject *c,
                             PyObject *d, PyObject *e)
{
#if PY_VERSION_HEX >= 0x030E0000
    PyObject *result = PyTuple_New(5);
#else
    PyObject *result = cls->tp_alloc(cls, 5);
#endif
    if (result == NULL) {
        Py_DECREF(a);
        Py_DECREF(b);
        Py_DECREF(c);
        Py_DECREF(d);
        Py_DECREF(e);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, a);
    PyTuple_SET_ITEM(result, 1, b);
    PyTuple_SET_ITEM(result, 2, c);
    PyTuple_SET_ITEM(result, 3, d);
    PyTuple_SET_ITEM(result, 4, e);
#if PY_VERSION_HEX >= 0x030E0000
    PyObject *args1 = PyTuple_Pack(1, result);
    Py_DECREF(result);
    result = args1 ? PyTuple_Type.tp_new(cls, args1, NULL) : NULL;
    Py_XDECREF(args1);
#endif
    return result;
}

#endif /* MQCORE_SPEEDUPS_H */
