/*
 * mqcore.remoting._remoting: the remoting request path's per-frame work, in C.
 *
 * cut() cuts complete frames out of a received byte stream (the reference is
 * mqcore.remoting.frame.FrameDecoder._cut); decode_json_frame() reads a frame with a JSON
 * header into the command's fields (the reference is RemotingCommand.decode). Both are
 * optional and partial by design: whatever they do not take on (a bad length word, a binary
 * header, a JSON header outside the shape every client writes) they hand back to the Python
 * reference, which decides and words the error. The tests hold both to the reference.
 */
#include "speedups.h"

/* --- JSON headers --------------------------------------------------------------------- */

/* A reader over one header. Any shape it does not take on sets ``punt``: the caller then
 * answers None and the Python reference decodes the frame (and words any error). */
typedef struct {
    const unsigned char *p, *end;
    int punt;
} Reader;

static const char *const LANGUAGES[] = {
    "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY",
    "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST", "NODE_JS",
};
#define N_LANGUAGES ((int)(sizeof(LANGUAGES) / sizeof(LANGUAGES[0])))
#define LANGUAGE_OTHER 7

static void skip_ws(Reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A JSON string at r->p (its opening quote) as a new str, or NULL (with r->punt set, or an
 * exception for a memory error). Escapes are JSON's; a \u escape of a surrogate, a raw
 * control character or bytes that are not UTF-8 punt. */
static PyObject *read_string(Reader *r)
{
    if (r->p >= r->end || *r->p != '"') {
        r->punt = 1;
        return NULL;
    }
    const unsigned char *start = ++r->p, *q = start;
    int escaped = 0;
    while (q < r->end && *q != '"') {
        if (*q < 0x20) {
            r->punt = 1;
            return NULL;
        }
        if (*q == '\\') {
            escaped = 1;
            q++;
            if (q >= r->end) {
                r->punt = 1;
                return NULL;
            }
        }
        q++;
    }
    if (q >= r->end) {
        r->punt = 1;
        return NULL;
    }
    r->p = q + 1;
    PyObject *s;
    if (!escaped) {
        s = PyUnicode_DecodeUTF8((const char *)start, q - start, NULL);
    } else {
        /* Unescaped text never grows: a \uXXXX (6 bytes) gives at most 3 bytes of UTF-8. */
        unsigned char small[256];
        Py_ssize_t cap = q - start;
        unsigned char *buf = cap <= (Py_ssize_t)sizeof(small) ? small : PyMem_Malloc(cap);
        if (buf == NULL)
            return PyErr_NoMemory();
        unsigned char *o = buf;
        const unsigned char *c = start;
        while (c < q) {
            if (*c != '\\') {
                *o++ = *c++;
                continue;
            }
            c++;
            switch (*c++) {
            case '"': *o++ = '"'; break;
            case '\\': *o++ = '\\'; break;
            case '/': *o++ = '/'; break;
            case 'b': *o++ = '\b'; break;
            case 'f': *o++ = '\f'; break;
            case 'n': *o++ = '\n'; break;
            case 'r': *o++ = '\r'; break;
            case 't': *o++ = '\t'; break;
            case 'u': {
                if (q - c < 4) {
                    r->punt = 1;
                    goto fail;
                }
                int cp = 0;
                for (int i = 0; i < 4; i++) {
                    int h = hexval(c[i]);
                    if (h < 0) {
                        r->punt = 1;
                        goto fail;
                    }
                    cp = cp * 16 + h;
                }
                c += 4;
                if (cp >= 0xD800 && cp <= 0xDFFF) { /* pairs and lone halves: the reference */
                    r->punt = 1;
                    goto fail;
                }
                if (cp < 0x80) {
                    *o++ = (unsigned char)cp;
                } else if (cp < 0x800) {
                    *o++ = (unsigned char)(0xC0 | (cp >> 6));
                    *o++ = (unsigned char)(0x80 | (cp & 0x3F));
                } else {
                    *o++ = (unsigned char)(0xE0 | (cp >> 12));
                    *o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                    *o++ = (unsigned char)(0x80 | (cp & 0x3F));
                }
                break;
            }
            default:
                r->punt = 1;
                goto fail;
            }
        }
        s = PyUnicode_DecodeUTF8((const char *)buf, o - buf, NULL);
        if (buf != small)
            PyMem_Free(buf);
        goto decoded;
    fail:
        if (buf != small)
            PyMem_Free(buf);
        return NULL;
    }
decoded:
    if (s == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
        r->punt = 1;
    }
    return s;
}

/* A JSON value at r->p that is a string, an integer of int64, true, false or null, as a new
 * reference; anything else (objects, arrays, fractions, exponents, big integers) punts. */
static PyObject *read_scalar(Reader *r)
{
    if (r->p >= r->end) {
        r->punt = 1;
        return NULL;
    }
    unsigned char c = *r->p;
    if (c == '"')
        return read_string(r);
    if (c == '-' || (c >= '0' && c <= '9')) {
        const unsigned char *q = r->p;
        int neg = 0;
        if (*q == '-') {
            neg = 1;
            q++;
        }
        if (q >= r->end || *q < '0' || *q > '9') {
            r->punt = 1;
            return NULL;
        }
        if (*q == '0' && q + 1 < r->end && q[1] >= '0' && q[1] <= '9') {
            r->punt = 1; /* a leading zero: not JSON */
            return NULL;
        }
        uint64_t v = 0;
        int digits = 0;
        while (q < r->end && *q >= '0' && *q <= '9') {
            if (++digits > 18) { /* past what surely fits int64: the reference */
                r->punt = 1;
                return NULL;
            }
            v = v * 10 + (uint64_t)(*q - '0');
            q++;
        }
        if (q < r->end && (*q == '.' || *q == 'e' || *q == 'E')) {
            r->punt = 1;
            return NULL;
        }
        r->p = q;
        return PyLong_FromLongLong(neg ? -(long long)v : (long long)v);
    }
    static const struct {
        const char *word;
        Py_ssize_t n;
    } words[] = {{"true", 4}, {"false", 5}, {"null", 4}};
    for (int i = 0; i < 3; i++) {
        if (r->end - r->p >= words[i].n && memcmp(r->p, words[i].word, words[i].n) == 0) {
            r->p += words[i].n;
            PyObject *v = i == 0 ? Py_True : i == 1 ? Py_False : Py_None;
            Py_INCREF(v);
            return v;
        }
    }
    r->punt = 1;
    return NULL;
}

/* Expect ``ch`` after optional whitespace. */
static int expect(Reader *r, unsigned char ch)
{
    skip_ws(r);
    if (r->p < r->end && *r->p == ch) {
        r->p++;
        return 1;
    }
    r->punt = 1;
    return 0;
}

/* The extFields object at r->p: a new dict of str keys and scalar values. */
static PyObject *read_ext(Reader *r)
{
    if (!expect(r, '{'))
        return NULL;
    PyObject *ext = PyDict_New();
    if (ext == NULL)
        return NULL;
    skip_ws(r);
    if (r->p < r->end && *r->p == '}') {
        r->p++;
        return ext;
    }
    for (;;) {
        skip_ws(r);
        PyObject *key = read_string(r);
        if (key == NULL)
            goto fail;
        if (!expect(r, ':')) {
            Py_DECREF(key);
            goto fail;
        }
        skip_ws(r);
        PyObject *value = read_scalar(r);
        if (value == NULL) {
            Py_DECREF(key);
            goto fail;
        }
        int rc = PyDict_SetItem(ext, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (rc < 0)
            goto fail;
        skip_ws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (expect(r, '}'))
            return ext;
        goto fail;
    }
fail:
    Py_DECREF(ext);
    return NULL;
}

enum { K_CODE, K_LANGUAGE, K_VERSION, K_OPAQUE, K_FLAG, K_REMARK, K_EXT, K_OTHER };

static int key_of(PyObject *key)
{
    static const char *const names[] = {"code", "language", "version", "opaque",
                                        "flag", "remark", "extFields"};
    for (int i = 0; i < K_OTHER; i++)
        if (PyUnicode_CompareWithASCIIString(key, names[i]) == 0)
            return i;
    return K_OTHER;
}

/* An int32 field: 1 when ``v`` is an exact int in range (stored in *out), else 0. */
static int int32_field(PyObject *v, long *out)
{
    if (!PyLong_CheckExact(v))
        return 0;
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (x < INT32_MIN || x > INT32_MAX)
        return 0;
    *out = (long)x;
    return 1;
}

/* decode_json_frame(frame) -> (code, language, version, opaque, flag, remark, ext_fields,
 * body) | None. ``frame`` is one frame without its total-length word. ``language`` is
 * LanguageCode's value. None: the frame is not a JSON header of the shape every client
 * writes, or is malformed: RemotingCommand.decode's Python code decides. */
static PyObject *decode_json_at(const unsigned char *p, Py_ssize_t len);

static PyObject *decode_json_frame(PyObject *self, PyObject *obj)
{
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = decode_json_at((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return result;
}

/* decode_json_frame's work on the ``len`` bytes at ``p`` (one frame without its total-length
 * word), so a caller that holds the stream decodes a frame where it lies. */
static PyObject *decode_json_at(const unsigned char *p, Py_ssize_t len)
{
    PyObject *result = NULL, *values[K_OTHER] = {NULL};
    if (len < 4 || p[0] != 0)
        goto punt;
    Py_ssize_t header_len = (Py_ssize_t)(get_be32(p) & 0xFFFFFF);
    if (header_len > len - 4)
        goto punt;
    Reader r = {p + 4, p + 4 + header_len, 0};
    if (!expect(&r, '{'))
        goto punt;
    skip_ws(&r);
    if (r.p < r.end && *r.p == '}') {
        r.p++;
    } else {
        for (;;) {
            skip_ws(&r);
            PyObject *key = read_string(&r);
            if (key == NULL)
                goto out;
            int k = key_of(key);
            Py_DECREF(key);
            if (!expect(&r, ':'))
                goto out;
            skip_ws(&r);
            PyObject *value;
            if (k == K_EXT && r.p < r.end && *r.p == '{')
                value = read_ext(&r);
            else
                value = read_scalar(&r);
            if (value == NULL)
                goto out;
            if (k == K_OTHER) {
                Py_DECREF(value);
            } else {
                Py_XSETREF(values[k], value); /* a repeated key: the last one counts */
            }
            skip_ws(&r);
            if (r.p < r.end && *r.p == ',') {
                r.p++;
                continue;
            }
            if (!expect(&r, '}'))
                goto out;
            break;
        }
    }
    skip_ws(&r);
    if (r.p != r.end)
        goto punt;
    /* The checks of the reference; any that fails is the reference's to word. */
    long code, version = 0, opaque = 0, flag = 0;
    if (values[K_CODE] == NULL || !int32_field(values[K_CODE], &code))
        goto punt;
    if (values[K_VERSION] != NULL && !int32_field(values[K_VERSION], &version))
        goto punt;
    if (values[K_OPAQUE] != NULL && !int32_field(values[K_OPAQUE], &opaque))
        goto punt;
    if (values[K_FLAG] != NULL && !int32_field(values[K_FLAG], &flag))
        goto punt;
    PyObject *remark = values[K_REMARK] != NULL ? values[K_REMARK] : Py_None;
    if (remark != Py_None && !PyUnicode_CheckExact(remark))
        goto punt;
    PyObject *ext = values[K_EXT] != NULL ? values[K_EXT] : Py_None;
    if (ext != Py_None && !PyDict_CheckExact(ext))
        goto punt;
    long language = 0; /* JAVA when absent, as RocketMQ */
    PyObject *lang = values[K_LANGUAGE];
    if (lang != NULL) {
        if (PyUnicode_CheckExact(lang)) {
            language = LANGUAGE_OTHER;
            for (int i = 0; i < N_LANGUAGES; i++)
                if (PyUnicode_CompareWithASCIIString(lang, LANGUAGES[i]) == 0) {
                    language = i;
                    break;
                }
        } else if (PyLong_CheckExact(lang)) {
            long long x = PyLong_AsLongLong(lang);
            if (x == -1 && PyErr_Occurred())
                goto out;
            language = x >= 0 && x < N_LANGUAGES ? (long)x : LANGUAGE_OTHER;
        } else {
            goto punt;
        }
    }
    PyObject *body;
    if (len > 4 + header_len) {
        body = PyBytes_FromStringAndSize((const char *)p + 4 + header_len,
                                         len - 4 - header_len);
        if (body == NULL)
            goto out;
    } else {
        body = Py_None;
        Py_INCREF(body);
    }
    result = Py_BuildValue("(lllllOON)", code, language, version, opaque, flag, remark, ext,
                           body);
    goto out;
punt:
    result = Py_None;
    Py_INCREF(result);
out:
    if (result == NULL && !PyErr_Occurred()) { /* a reader punted */
        result = Py_None;
        Py_INCREF(result);
    }
    for (int i = 0; i < K_OTHER; i++)
        Py_XDECREF(values[i]);
    return result;
}


/* --- encoding a JSON command ---------------------------------------------------------- */

typedef struct {
    char *buf;
    Py_ssize_t len, cap;
    char small[512];
} Out;

static int out_reserve(Out *o, Py_ssize_t n)
{
    if (o->len + n <= o->cap)
        return 0;
    Py_ssize_t cap = o->cap * 2;
    while (cap < o->len + n)
        cap *= 2;
    char *buf;
    if (o->buf == o->small) {
        buf = PyMem_Malloc(cap);
        if (buf != NULL)
            memcpy(buf, o->small, o->len);
    } else {
        buf = PyMem_Realloc(o->buf, cap);
    }
    if (buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    o->buf = buf;
    o->cap = cap;
    return 0;
}

static int out_raw(Out *o, const char *s, Py_ssize_t n)
{
    if (out_reserve(o, n) < 0)
        return -1;
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    return 0;
}

/* ``s`` as a JSON string the way json.encoder.encode_basestring writes it (non-ASCII kept,
 * the quote, the backslash and control characters escaped). 0 done, -1 error, 1 punt (not
 * an exact str, or a str that is not UTF-8 encodable: the reference meets it). */
static int out_string(Out *o, PyObject *s)
{
    if (!PyUnicode_CheckExact(s))
        return 1;
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(s, &n);
    if (p == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return -1;
        PyErr_Clear();
        return 1;
    }
    if (out_reserve(o, 6 * n + 2) < 0)
        return -1;
    char *w = o->buf + o->len;
    *w++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *w++ = (char)c;
            continue;
        }
        *w++ = '\\';
        switch (c) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '\n': *w++ = 'n'; break;
        case '\r': *w++ = 'r'; break;
        case '\t': *w++ = 't'; break;
        case '\b': *w++ = 'b'; break;
        case '\f': *w++ = 'f'; break;
        default:
            w += sprintf(w, "u%04x", c);
        }
    }
    *w++ = '"';
    o->len = w - o->buf;
    return 0;
}

/* Start a JSON header in ``o``: room for the frame's two length words (out_frame writes
 * them), then the fields every header this module writes opens with, up to "flag". 0 done,
 * -1 error. */
static int out_open(Out *o, long long code, long language, long long version, long long opaque,
                    long long flag)
{
    o->buf = o->small;
    o->len = 8;
    o->cap = sizeof(o->small);
    char fixed[200];
    int n = snprintf(fixed, sizeof(fixed),
                     "{\"code\":%lld,\"language\":\"%s\",\"version\":%lld,\"opaque\":%lld,"
                     "\"flag\":%lld",
                     code, LANGUAGES[language], version, opaque, flag);
    return out_raw(o, fixed, n);
}

/* ,"remark":... when ``remark`` is not None. 0 done, -1 error, 1 punt. */
static int out_remark(Out *o, PyObject *remark)
{
    if (remark == Py_None)
        return 0;
    if (out_raw(o, ",\"remark\":", 10) < 0)
        return -1;
    return out_string(o, remark);
}

/* An encoder's result, ``o`` freed: with rc 0 the frame (its length words written for a
 * body of ``body_len`` bytes); None with rc 1 or a header the frame cannot hold (the
 * reference's to write or refuse); NULL with rc -1 (the error set). */
static PyObject *out_frame(Out *o, int rc, Py_ssize_t body_len)
{
    PyObject *result = NULL;
    Py_ssize_t header_len = o->len - 8;
    if (rc == 0 && (header_len > 0xFFFFFF || 4 + header_len + body_len > INT32_MAX))
        rc = 1;
    if (rc == 0) {
        put_be32((unsigned char *)o->buf, (uint32_t)(4 + header_len + body_len));
        put_be32((unsigned char *)o->buf + 4, (uint32_t)header_len);
        result = PyBytes_FromStringAndSize(o->buf, o->len);
    } else if (rc > 0) {
        result = Py_None;
        Py_INCREF(result);
    }
    if (o->buf != o->small)
        PyMem_Free(o->buf);
    return result;
}

/* objs[0..n) into out as long longs; 0 when one is not an int or is past int64 (the
 * reference's to encode). */
static int long_longs(PyObject *const *objs, int n, long long *out)
{
    for (int i = 0; i < n; i++) {
        if (!PyLong_Check(objs[i]))
            return 0;
        int overflow;
        out[i] = PyLong_AsLongLongAndOverflow(objs[i], &overflow);
        if (overflow || (out[i] == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

/* encode_json_head(code, language, version, opaque, flag, remark, ext_fields, body_len) ->
 * bytes | None: the frame's two length words and its JSON header, the bytes
 * RemotingCommand.encode_parts writes (its reference). None: a value the reference must
 * encode (an extFields key or value that is not an exact str, a number past int64, a header
 * over 16 MiB), or that it refuses with its own error. */
static PyObject *encode_json_head(PyObject *self, PyObject *args)
{
    PyObject *code_o, *lang_o, *version_o, *opaque_o, *flag_o, *remark, *ext;
    Py_ssize_t body_len;
    if (!PyArg_ParseTuple(args, "OOOOOOOn:encode_json_head", &code_o, &lang_o, &version_o,
                          &opaque_o, &flag_o, &remark, &ext, &body_len))
        return NULL;
    long long nums[4];
    PyObject *num_objs[4] = {code_o, version_o, opaque_o, flag_o};
    if (!long_longs(num_objs, 4, nums))
        Py_RETURN_NONE;
    if (!PyLong_Check(lang_o))
        Py_RETURN_NONE;
    long language = PyLong_AsLong(lang_o);
    if (language < 0 || language >= N_LANGUAGES) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (remark != Py_None && !PyUnicode_CheckExact(remark))
        Py_RETURN_NONE;
    if (ext != Py_None && !PyDict_CheckExact(ext))
        Py_RETURN_NONE;
    Out o;
    int rc;
    if ((rc = out_open(&o, nums[0], language, nums[1], nums[2], nums[3])) != 0)
        goto end;
    if ((rc = out_remark(&o, remark)) != 0)
        goto end;
    if (ext != Py_None) {
        if ((rc = out_raw(&o, ",\"extFields\":{", 14)) != 0)
            goto end;
        Py_ssize_t i = 0;
        PyObject *key, *value;
        int first = 1;
        while (PyDict_Next(ext, &i, &key, &value)) {
            if (!first && (rc = out_raw(&o, ",", 1)) != 0)
                goto end;
            first = 0;
            if ((rc = out_string(&o, key)) != 0)
                goto end;
            if ((rc = out_raw(&o, ":", 1)) != 0)
                goto end;
            if ((rc = out_string(&o, value)) != 0)
                goto end;
        }
        if ((rc = out_raw(&o, "}", 1)) != 0)
            goto end;
    }
    rc = out_raw(&o, ",\"serializeTypeCurrentRPC\":\"JSON\"}", 34);
end:
    return out_frame(&o, rc, body_len);
}


/* --- the client's side ------------------------------------------------------------------
 *
 * encode_request_head() writes a request's length words and JSON header from its extFields
 * given as two parallel tuples (names, values), the values as a header's fields hold them
 * (str, int, bool, None: left out), so a client builds a send or pull request without a
 * header object or an extFields dict (the reference is
 * mqcore.remoting.command.py_encode_request_head). decode_answer() reads an answer frame
 * into its code, opaque, flag, remark and the header fields a plan names, with their
 * types, in one call (the reference is mqcore.remoting.command.py_decode_answer).
 */

/* A field value as extFields text, appended as a JSON string. 0 done, -1 error, 1 punt. */
static int out_field(Out *o, PyObject *v)
{
    if (PyUnicode_CheckExact(v))
        return out_string(o, v);
    if (v == Py_True)
        return out_raw(o, "\"true\"", 6);
    if (v == Py_False)
        return out_raw(o, "\"false\"", 7);
    if (PyLong_CheckExact(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || (x == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 1;
        }
        char digits[32];
        int n = snprintf(digits, sizeof(digits), "\"%lld\"", x);
        return out_raw(o, digits, n);
    }
    return 1;
}

/* encode_request_head(code, language, version, opaque, flag, names, values, body_len) ->
 * bytes | None: the length words and JSON header of a request whose extFields are
 * names[i]: values[i] for every value that is not None. None: a value the reference must
 * write (not a str, int or bool; an int past int64), or a header it refuses. */
static PyObject *encode_request_head(PyObject *self, PyObject *args)
{
    long long code, version, opaque, flag;
    long language;
    PyObject *names, *values;
    Py_ssize_t body_len;
    if (!PyArg_ParseTuple(args, "LlLLLO!O!n:encode_request_head", &code, &language, &version,
                          &opaque, &flag, &PyTuple_Type, &names, &PyTuple_Type, &values,
                          &body_len))
        return NULL;
    if (language < 0 || language >= N_LANGUAGES || PyTuple_GET_SIZE(names) != PyTuple_GET_SIZE(values))
        Py_RETURN_NONE;
    Out o;
    int rc;
    if ((rc = out_open(&o, code, language, version, opaque, flag)) != 0)
        goto end;
    if ((rc = out_raw(&o, ",\"extFields\":{", 14)) != 0)
        goto end;
    int first = 1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        PyObject *v = PyTuple_GET_ITEM(values, i);
        if (v == Py_None)
            continue;
        if (!first && (rc = out_raw(&o, ",", 1)) != 0)
            goto end;
        first = 0;
        if ((rc = out_string(&o, PyTuple_GET_ITEM(names, i))) != 0)
            goto end;
        if ((rc = out_raw(&o, ":", 1)) != 0)
            goto end;
        if ((rc = out_field(&o, v)) != 0)
            goto end;
    }
    rc = out_raw(&o, "},\"serializeTypeCurrentRPC\":\"JSON\"}", 35);
end:
    return out_frame(&o, rc, body_len);
}

/* A str field's text as an integer in [low, high] (the generated header reader's int()),
 * plain decimal digits with an optional sign only; 0 when it is not one (the reference
 * decides). */
static int field_int(PyObject *v, long long low, long long high, long long *out)
{
    if (!PyUnicode_CheckExact(v))
        return 0;
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(v, &n);
    if (p == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_ssize_t i = 0;
    int neg = 0;
    if (n > 0 && (p[0] == '-' || p[0] == '+')) {
        neg = p[0] == '-';
        i = 1;
    }
    if (i >= n || n - i > 18)
        return 0;
    long long x = 0;
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return 0;
        x = x * 10 + (p[i] - '0');
    }
    if (neg)
        x = -x;
    if (x < low || x > high)
        return 0;
    *out = x;
    return 1;
}

/* decode_answer(frame, plan) -> (code, opaque, flag, remark, values, body) | None. ``plan``
 * is a tuple of (wire name, kind, required): kind 0 a str, 1 an int32, 2 an int64, each
 * read from the str extFields a server writes; ``values`` holds them in the plan's order
 * (None for an absent optional field). None: the frame is not a JSON header of that shape,
 * a required field is absent, or a value is not plainly of its kind: the reference
 * (RemotingCommand.decode, then the header's reader) decides and words any error. */
static PyObject *decode_answer(PyObject *self, PyObject *args)
{
    PyObject *frame, *plan;
    if (!PyArg_ParseTuple(args, "OO!:decode_answer", &frame, &PyTuple_Type, &plan))
        return NULL;
    PyObject *fields = decode_json_frame(self, frame);
    if (fields == NULL || fields == Py_None)
        return fields;
    PyObject *ext = PyTuple_GET_ITEM(fields, 6);
    Py_ssize_t n = PyTuple_GET_SIZE(plan);
    PyObject *values = PyTuple_New(n), *result = NULL;
    if (values == NULL)
        goto out;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *spec = PyTuple_GET_ITEM(plan, i);
        if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 3) {
            PyErr_SetString(PyExc_TypeError, "decode_answer: a plan entry is (name, kind, required)");
            goto out;
        }
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(spec, 1));
        int required = PyObject_IsTrue(PyTuple_GET_ITEM(spec, 2));
        if ((kind == -1 || required < 0) && PyErr_Occurred())
            goto out;
        PyObject *raw = ext == Py_None ? NULL : PyDict_GetItemWithError(ext, PyTuple_GET_ITEM(spec, 0));
        if (raw == NULL && PyErr_Occurred())
            goto out;
        PyObject *value;
        if (raw == NULL || raw == Py_None || (kind != 0 && PyUnicode_CheckExact(raw) &&
                                              PyUnicode_GET_LENGTH(raw) == 0)) {
            if (required)
                goto punt;
            value = Py_None;
            Py_INCREF(value);
        } else if (kind == 0) {
            if (!PyUnicode_CheckExact(raw))
                goto punt;
            value = raw;
            Py_INCREF(value);
        } else {
            long long x;
            int ok = kind == 1 ? field_int(raw, INT32_MIN, INT32_MAX, &x)
                               : field_int(raw, INT64_MIN, INT64_MAX, &x);
            if (!ok)
                goto punt;
            value = PyLong_FromLongLong(x);
            if (value == NULL)
                goto out;
        }
        PyTuple_SET_ITEM(values, i, value);
    }
    result = Py_BuildValue("(OOOOOO)", PyTuple_GET_ITEM(fields, 0), PyTuple_GET_ITEM(fields, 3),
                           PyTuple_GET_ITEM(fields, 4), PyTuple_GET_ITEM(fields, 5), values,
                           PyTuple_GET_ITEM(fields, 7));
    goto out;
punt:
    result = Py_None;
    Py_INCREF(result);
out:
    Py_XDECREF(values);
    Py_DECREF(fields);
    return result;
}

/* encode_send_answer(code, language, version, opaque, remark, msg_id, queue_id, queue_offset,
 * transaction_id) -> a single send's whole answer frame (JSON header, no body), or None when
 * the Python encoder must write it. The header is what
 * RemotingCommand.response(code, remark, SendMessageResponseHeader(...)) encodes to: flag 1,
 * extFields msgId, queueId, queueOffset and (when not None) transactionId, as strings. */
static PyObject *encode_send_answer(PyObject *self, PyObject *args)
{
    PyObject *code_o, *lang_o, *version_o, *opaque_o, *remark, *msg_id, *queue_id_o,
        *queue_offset_o, *txn;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO:encode_send_answer", &code_o, &lang_o, &version_o,
                          &opaque_o, &remark, &msg_id, &queue_id_o, &queue_offset_o, &txn))
        return NULL;
    long long nums[6];
    PyObject *num_objs[6] = {code_o, version_o, opaque_o, queue_id_o, queue_offset_o, lang_o};
    if (!long_longs(num_objs, 6, nums))
        Py_RETURN_NONE;
    if (nums[5] < 0 || nums[5] >= N_LANGUAGES)
        Py_RETURN_NONE;
    /* The values the Python writer would refuse or convert are its to handle. */
    if (nums[3] < INT32_MIN || nums[3] > INT32_MAX)
        Py_RETURN_NONE;
    if (remark != Py_None && !PyUnicode_CheckExact(remark))
        Py_RETURN_NONE;
    if (!PyUnicode_CheckExact(msg_id))
        Py_RETURN_NONE;
    if (txn != Py_None && !PyUnicode_CheckExact(txn))
        Py_RETURN_NONE;
    Out o;
    int rc;
    if ((rc = out_open(&o, nums[0], (long)nums[5], nums[1], nums[2], 1)) != 0)
        goto end;
    if ((rc = out_remark(&o, remark)) != 0)
        goto end;
    if ((rc = out_raw(&o, ",\"extFields\":{\"msgId\":", 22)) != 0)
        goto end;
    if ((rc = out_string(&o, msg_id)) != 0)
        goto end;
    char fixed[100];
    int n = snprintf(fixed, sizeof(fixed), ",\"queueId\":\"%lld\",\"queueOffset\":\"%lld\"",
                     nums[3], nums[4]);
    if ((rc = out_raw(&o, fixed, n)) != 0)
        goto end;
    if (txn != Py_None) {
        if ((rc = out_raw(&o, ",\"transactionId\":", 17)) != 0)
            goto end;
        if ((rc = out_string(&o, txn)) != 0)
            goto end;
    }
    rc = out_raw(&o, "},\"serializeTypeCurrentRPC\":\"JSON\"}", 35);
end:
    return out_frame(&o, rc, 0);
}

/* --- frames: cut, and cut and decoded in one call ----------------------------------- */

/* The loop of cut() and cut_decode(): the complete frames of buf[pos:end] appended to a
 * list; the return value is where the first incomplete frame starts, or -1 - (where a bad
 * length word starts) so the reference can raise its error there. With ``decode``, a frame
 * is appended as decode_json_frame's tuple, decoded where it lies in ``buf`` (no copy of the
 * frame), or as the frame's bytes when that decoder leaves it to the reference; without,
 * as its bytes. */
static PyObject *cut_frames(PyObject *args, const char *format, const char *name, int decode)
{
    PyObject *obj, *items;
    Py_ssize_t pos, end, limit;
    if (!PyArg_ParseTuple(args, format, &obj, &pos, &end, &limit, &PyList_Type, &items))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (pos < 0 || end > view.len || pos > end) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "%s: range %zd:%zd is outside the buffer of %zd bytes",
                     name, pos, end, view.len);
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)view.buf;
    while (end - pos >= 4) {
        int32_t length = (int32_t)get_be32(p + pos);
        if (length < 4 || (Py_ssize_t)length + 4 > limit) {
            pos = -1 - pos;
            break;
        }
        if (end - pos - 4 < length)
            break;
        const unsigned char *frame = p + pos + 4;
        PyObject *item = decode ? decode_json_at(frame, length) : Py_NewRef(Py_None);
        if (item == Py_None) {
            Py_DECREF(item);
            item = PyBytes_FromStringAndSize((const char *)frame, length);
        }
        if (item == NULL || PyList_Append(items, item) < 0) {
            Py_XDECREF(item);
            PyBuffer_Release(&view);
            return NULL;
        }
        Py_DECREF(item);
        pos += 4 + (Py_ssize_t)length;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(pos);
}

/* cut(buf, pos, end, limit, frames) -> int: append the complete frames of buf[pos:end] (each
 * without its length word, as bytes) to the list ``frames`` (the reference is
 * FrameDecoder._cut). */
static PyObject *cut(PyObject *self, PyObject *args)
{
    return cut_frames(args, "OnnnO!:cut", "cut", 0);
}

/* cut_decode(buf, pos, end, limit, items) -> int: cut() and decode_json_frame() in one pass
 * over what one read brought (the reference is FrameDecoder.feed followed by
 * RemotingCommand.decode). */
static PyObject *cut_decode(PyObject *self, PyObject *args)
{
    return cut_frames(args, "OnnnO!:cut_decode", "cut_decode", 1);
}

static PyMethodDef methods[] = {
    {"cut", cut, METH_VARARGS,
     "cut(buf, pos, end, limit, frames) -> int: append buf[pos:end]'s complete frames to "
     "frames; return where the next starts, or -1 - where a bad length word starts."},
    {"decode_json_frame", decode_json_frame, METH_O,
     "decode_json_frame(frame) -> (code, language, version, opaque, flag, remark, ext_fields, "
     "body) or None when the Python decoder must decide."},
    {"encode_json_head", encode_json_head, METH_VARARGS,
     "encode_json_head(code, language, version, opaque, flag, remark, ext_fields, body_len) "
     "-> the length words and JSON header of a frame, or None when the Python encoder must "
     "write it."},
    {"encode_request_head", encode_request_head, METH_VARARGS,
     "encode_request_head(code, language, version, opaque, flag, names, values, body_len) -> "
     "the length words and JSON header of a request, or None when the Python encoder must "
     "write it."},
    {"decode_answer", decode_answer, METH_VARARGS,
     "decode_answer(frame, plan) -> (code, opaque, flag, remark, values, body) or None when "
     "the Python decoder must decide."},
    {"encode_send_answer", encode_send_answer, METH_VARARGS,
     "encode_send_answer(code, language, version, opaque, remark, msg_id, queue_id, "
     "queue_offset, transaction_id) -> a single send's answer frame, or None when the Python "
     "encoder must write it (see mqcore.remoting.send_answer)."},
    {"cut_decode", cut_decode, METH_VARARGS,
     "cut_decode(buf, pos, end, limit, items) -> int: cut(), each frame appended as "
     "decode_json_frame's tuple or, when that is None, as the frame's bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "mqcore.remoting._remoting",
    "C versions of the remoting request path's per-frame work (see mqcore.remoting.frame "
    "and mqcore.remoting.command).",
    -1,
    methods,
};

PyMODINIT_FUNC PyInit__remoting(void)
{
    return PyModule_Create(&module);
}
