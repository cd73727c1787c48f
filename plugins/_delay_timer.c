/*
 * mqcore.plugins._delay_timer: the timer-wheel scheduler's loops, in C.
 *
 * link_timers() links held messages into the wheel (the reference is
 * mqcore.plugins.delay_timer_wheel.py_link_timers); write_slots() writes changed slots into
 * the mapped wheel (mqcore.plugins.delay_timer_files.py_write_slots). Optional: without it
 * the Python code serves, and the tests hold both to the same results.
 */
#include "speedups.h"

/* --- the timer wheel's enqueue loop (plugins.delay_timer_wheel) ---------------------- */

/* The timer log's unit and the wheel's slot (mqcore.plugins.delay_timer_files). */
#define TIMER_UNIT 56
#define SLOT_BYTES 32
#define TIMER_UNIT_MAGIC 0x54494D52

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
    Py_ssize_t n = units.len / UNIT_SIZE, i = start;
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
        const unsigned char *unit = u + i * UNIT_SIZE;
        long long phys = (long long)get_be64(unit);
        long long size = (int32_t)get_be32(unit + UNIT_POS_SIZE);
        long long deliver = (long long)get_be64(unit + UNIT_POS_TAGS_CODE);
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

static PyMethodDef methods[] = {
    {"link_timers", speedups_link_timers, METH_VARARGS, link_timers_doc},
    {"write_slots", speedups_write_slots, METH_VARARGS, write_slots_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "mqcore.plugins._delay_timer",
    "C versions of the timer wheel's loops (see mqcore.plugins.delay_timer_wheel).",
    -1,
    methods,
};

PyMODINIT_FUNC PyInit__delay_timer(void)
{
    return PyModule_Create(&module);
}
