/* The C twin of keyhash.py: the same `extend_keys` and `trace_keys`, the same keys, without a Python
 * object per key but the key itself.
 *
 * keyhash.py defines key i as hash((key i-1, pieces)), pieces a tuple of (identity, start, end)
 * tuples. Hashing that builds three tuples and two ints for every key and drops them again; here
 * the hashes of those tuples are computed directly, with the arithmetic CPython itself applies to a
 * tuple (Objects/tupleobject.c, CPython 3.8 and later: an xxHash-style accumulation of the items'
 * hashes) and to an int (its value modulo 2**61 - 1, with its sign, -1 taken as -2: the numeric
 * hash of the Python reference, "Hashing of numeric types"). A segment identity is a tuple of ints
 * hashed by CPython itself, once per part, and so is a trace block's hash id, once per block (a
 * trace key is hash((tag, hash id, offset)), an output key hash((prev, tag, request, end)): tuples
 * of ints, the same arithmetic). tests/test_keyhash.py holds this module to keyhash.py
 * and to hash() on every kind of chain; a CPython whose hashes differ fails there, loudly.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

_Static_assert(sizeof(Py_hash_t) == 8 && sizeof(long long) == 8, "keyhash assumes 64-bit hashes");

#define PRIME_1 11400714785074694791ULL
#define PRIME_2 14029467366897019727ULL
#define PRIME_5 2870177450012600261ULL
#define INT_MODULUS ((1ULL << 61) - 1)

typedef struct {
    Py_uhash_t acc;
    Py_ssize_t len;
} tuple_hash;

static inline void tuple_start(tuple_hash *t) {
    t->acc = PRIME_5;
    t->len = 0;
}

static inline void tuple_item(tuple_hash *t, Py_hash_t item) {
    t->acc += (Py_uhash_t)item * PRIME_2;
    t->acc = (t->acc << 31) | (t->acc >> 33);
    t->acc *= PRIME_1;
    t->len++;
}

static inline Py_hash_t tuple_end(const tuple_hash *t) {
    Py_uhash_t acc = t->acc + ((Py_uhash_t)t->len ^ (PRIME_5 ^ 3527539UL));
    return acc == (Py_uhash_t)-1 ? 1546275796 : (Py_hash_t)acc;
}

static inline Py_hash_t int_hash(long long value) {
    unsigned long long size = value < 0 ? 0ULL - (unsigned long long)value : (unsigned long long)value;
    Py_hash_t h = (Py_hash_t)(size % INT_MODULUS);
    if (value < 0)
        h = -h;
    return h == -1 ? -2 : h;
}

/* hash((ident, start, end)) given hash(ident) */
static inline Py_hash_t piece_hash(Py_hash_t ident, long long start, long long end) {
    tuple_hash t;
    tuple_start(&t);
    tuple_item(&t, ident);
    tuple_item(&t, int_hash(start));
    tuple_item(&t, int_hash(end));
    return tuple_end(&t);
}

/* hash((prev, pieces)) given hash(pieces) */
static inline Py_hash_t key_hash(long long prev, Py_hash_t pieces) {
    tuple_hash t;
    tuple_start(&t);
    tuple_item(&t, int_hash(prev));
    tuple_item(&t, pieces);
    return tuple_end(&t);
}

/* Part `index` of `parts`: its identity's hash and its length, read unless `*known` says they are its already. */
static int read_part(PyObject *parts, Py_ssize_t index, Py_ssize_t *known, Py_hash_t *ident, long long *length) {
    if (*known == index)
        return 0;
    if (index >= PyTuple_GET_SIZE(parts)) {
        PyErr_SetString(PyExc_IndexError, "tuple index out of range");
        return -1;
    }
    PyObject *part = PyTuple_GET_ITEM(parts, index);
    if (!PyTuple_Check(part) || PyTuple_GET_SIZE(part) != 2) {
        PyErr_SetString(PyExc_TypeError, "a part must be a (segment identity, tokens) tuple");
        return -1;
    }
    *length = PyLong_AsLongLong(PyTuple_GET_ITEM(part, 1));
    if (*length == -1 && PyErr_Occurred())
        return -1;
    *ident = PyObject_Hash(PyTuple_GET_ITEM(part, 0));
    if (*ident == -1)
        return -1;
    *known = index;
    return 0;
}

static PyObject *extend_keys(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "extend_keys(parts, n_keys, unit, keys, root) takes 5 arguments");
        return NULL;
    }
    PyObject *parts = args[0];
    if (!PyTuple_Check(parts)) {
        PyErr_SetString(PyExc_TypeError, "parts must be a tuple");
        return NULL;
    }
    Py_ssize_t n_keys = PyLong_AsSsize_t(args[1]);
    long long unit = PyLong_AsLongLong(args[2]);
    long long root = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *keys = args[3];
    if (!PyList_Check(keys)) {
        PyErr_SetString(PyExc_TypeError, "keys must be a list");
        return NULL;
    }
    Py_ssize_t have = PyList_GET_SIZE(keys);
    if (have >= n_keys)
        Py_RETURN_NONE;

    Py_ssize_t pi = 0, known = -1;
    Py_hash_t ident = 0;
    long long po = have * unit, plen = 0, prev = root;
    if (have) {
        prev = PyLong_AsLongLong(PyList_GET_ITEM(keys, have - 1));
        if (prev == -1 && PyErr_Occurred())
            return NULL;
    }
    for (;;) {                                      /* the part holding token `have * unit` */
        if (read_part(parts, pi, &known, &ident, &plen) < 0)
            return NULL;
        if (po < plen)
            break;
        po -= plen;
        pi++;
    }
    for (Py_ssize_t k = have; k < n_keys; k++) {
        if (read_part(parts, pi, &known, &ident, &plen) < 0)
            return NULL;
        if (plen - po > unit) {                     /* the common case: the unit lies inside one part */
            tuple_hash pieces;
            tuple_start(&pieces);
            tuple_item(&pieces, piece_hash(ident, po, po + unit));
            prev = key_hash(prev, tuple_end(&pieces));
            po += unit;
        } else {
            tuple_hash pieces;
            tuple_start(&pieces);
            for (long long need = unit; need;) {
                if (read_part(parts, pi, &known, &ident, &plen) < 0)
                    return NULL;
                long long take = need < plen - po ? need : plen - po;
                tuple_item(&pieces, piece_hash(ident, po, po + take));
                po += take;
                need -= take;
                if (po == plen) {
                    pi++;
                    po = 0;
                }
            }
            prev = key_hash(prev, tuple_end(&pieces));
        }
        PyObject *key = PyLong_FromLongLong(prev);
        if (key == NULL || PyList_Append(keys, key) < 0) {
            Py_XDECREF(key);
            return NULL;
        }
        Py_DECREF(key);
    }
    Py_RETURN_NONE;
}

static PyObject *trace_keys(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError,
                        "trace_keys(hash_ids, input_length, length, unit, block_size, request, trace_tag, output_tag) "
                        "takes 8 arguments");
        return NULL;
    }
    PyObject *ids = args[0];
    if (!PyList_Check(ids)) {
        PyErr_SetString(PyExc_TypeError, "hash_ids must be a list");
        return NULL;
    }
    long long input_length = PyLong_AsLongLong(args[1]), length = PyLong_AsLongLong(args[2]);
    long long unit = PyLong_AsLongLong(args[3]), block_size = PyLong_AsLongLong(args[4]);
    long long request = PyLong_AsLongLong(args[5]), trace_tag = PyLong_AsLongLong(args[6]);
    long long output_tag = PyLong_AsLongLong(args[7]);
    if (PyErr_Occurred())
        return NULL;
    if (unit <= 0 || block_size <= 0) {
        PyErr_SetString(PyExc_ValueError, "unit and block_size must be positive");
        return NULL;
    }
    long long n_in = input_length / unit, n = length / unit;
    PyObject *keys = PyList_New(0);
    if (keys == NULL)
        return NULL;
    long long prev = trace_tag;
    Py_ssize_t known_block = -1;
    Py_hash_t id_hash = 0;
    for (long long k = 0; k < n; k++) {
        long long e = (k + 1) * unit;
        tuple_hash t;
        tuple_start(&t);
        if (k < n_in) {                             /* hash((trace_tag, hash_ids[b], e - b*block_size)) */
            Py_ssize_t b = (Py_ssize_t)((e - 1) / block_size);
            if (b != known_block) {
                if (b >= PyList_GET_SIZE(ids)) {
                    PyErr_SetString(PyExc_IndexError, "list index out of range");
                    goto fail;
                }
                id_hash = PyObject_Hash(PyList_GET_ITEM(ids, b));
                if (id_hash == -1)
                    goto fail;
                known_block = b;
            }
            tuple_item(&t, int_hash(trace_tag));
            tuple_item(&t, id_hash);
            tuple_item(&t, int_hash(e - (long long)b * block_size));
        } else {                                    /* hash((prev, output_tag, request, e)) */
            tuple_item(&t, int_hash(prev));
            tuple_item(&t, int_hash(output_tag));
            tuple_item(&t, int_hash(request));
            tuple_item(&t, int_hash(e));
        }
        prev = tuple_end(&t);
        PyObject *key = PyLong_FromLongLong(prev);
        if (key == NULL || PyList_Append(keys, key) < 0) {
            Py_XDECREF(key);
            goto fail;
        }
        Py_DECREF(key);
    }
    return keys;
fail:
    Py_DECREF(keys);
    return NULL;
}

static PyMethodDef methods[] = {
    {"extend_keys", (PyCFunction)(void (*)(void))extend_keys, METH_FASTCALL,
     "extend_keys(parts, n_keys, unit, keys, root): append to keys the next of parts' first n_keys keys (keyhash.py)"},
    {"trace_keys", (PyCFunction)(void (*)(void))trace_keys, METH_FASTCALL,
     "trace_keys(hash_ids, input_length, length, unit, block_size, request, trace_tag, output_tag): a trace "
     "request's keys (keyhash.py)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef keyhash_module = {
    PyModuleDef_HEAD_INIT, "kvplan.sim.keyhash",
    "Block keys of a content, computed in C (the twin of keyhash.py).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_keyhash(void) {
    return PyModule_Create(&keyhash_module);
}
