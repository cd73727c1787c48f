/*
 * mqcore.broker._schedule: the broker's hold of timer messages, in C.
 *
 * hold_timers() prepares the records that hold a batch of timer messages in the timer
 * topic (mqcore.broker.schedule's Python code is the reference). Optional: without it the
 * Python code serves, and the tests hold both to the same results.
 */
#define SPEEDUPS_MESSAGE_FIELDS
#include "speedups.h"

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
    if (total > MAX_PROPERTIES_SIZE)
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
    if (topic_s == NULL || qid_s == NULL || tt_s == NULL || tt_len < 1 || tt_len > MAX_TOPIC_LENGTH)
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

static PyMethodDef methods[] = {
    {"hold_timers", speedups_hold_timers, METH_VARARGS, hold_timers_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "mqcore.broker._schedule",
    "C version of the broker's timer-message hold (see mqcore.broker.schedule).",
    -1,
    methods,
};

PyMODINIT_FUNC PyInit__schedule(void)
{
    if (intern_field_names() < 0)
        return NULL;
    return PyModule_Create(&module);
}
