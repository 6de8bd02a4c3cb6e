/* The C twin of eventqueue.py: the simulated clock's queue of events to come, the same order.
 *
 * eventqueue.py keeps (time, priority, insertion order, event) tuples in a heapq heap; comparing two
 * of them compares Python floats and ints, and every push builds a tuple and an int that the pop
 * drops again. Here an entry is a C struct of the same three keys and the event, and the heap
 * compares doubles and integers. Every entry's insertion order is its own, so no two entries are
 * equal and any correct heap gives the events back in the one order the keys define: the one
 * eventqueue.py gives (tests/test_eventqueue.py holds the two together on random pushes and pops).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
    double when;
    long long priority;
    unsigned long long order;
    PyObject *event;
} Entry;

typedef struct {
    PyObject_HEAD
    Entry *heap;
    Py_ssize_t len, cap;
    unsigned long long pushed;
} EventQueue;

static inline int before(const Entry *a, const Entry *b) {
    if (a->when != b->when)                 /* NaN never enters: push refuses it */
        return a->when < b->when;
    if (a->priority != b->priority)
        return a->priority < b->priority;
    return a->order < b->order;
}

static PyObject *push(EventQueue *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "push(when, priority, event) takes 3 arguments, got %zd", nargs);
        return NULL;
    }
    double when = PyFloat_AsDouble(args[0]);
    if (when == -1.0 && PyErr_Occurred())
        return NULL;
    if (when != when) {
        PyErr_SetString(PyExc_ValueError, "an event cannot happen at time NaN");
        return NULL;
    }
    long long priority = PyLong_AsLongLong(args[1]);
    if (priority == -1 && PyErr_Occurred())
        return NULL;
    if (self->len == self->cap) {
        Py_ssize_t cap = self->cap ? 2 * self->cap : 64;
        Entry *grown = PyMem_Realloc(self->heap, (size_t)cap * sizeof(Entry));
        if (grown == NULL)
            return PyErr_NoMemory();
        self->heap = grown;
        self->cap = cap;
    }
    Entry entry = {when, priority, ++self->pushed, Py_NewRef(args[2])};
    Entry *heap = self->heap;
    Py_ssize_t i = self->len++;
    while (i > 0) {                          /* move up past every parent it comes before */
        Py_ssize_t parent = (i - 1) / 2;
        if (!before(&entry, &heap[parent]))
            break;
        heap[i] = heap[parent];
        i = parent;
    }
    heap[i] = entry;
    Py_RETURN_NONE;
}

static PyObject *pop(EventQueue *self, PyObject *Py_UNUSED(ignored)) {
    if (self->len == 0) {
        PyErr_SetString(PyExc_IndexError, "pop from an empty event queue");
        return NULL;
    }
    Entry *heap = self->heap;
    Entry first = heap[0];
    Entry last = heap[--self->len];
    Py_ssize_t n = self->len, i = 0;
    for (;;) {                               /* move the last entry down from the root */
        Py_ssize_t child = 2 * i + 1;
        if (child >= n)
            break;
        if (child + 1 < n && before(&heap[child + 1], &heap[child]))
            child++;
        if (!before(&heap[child], &last))
            break;
        heap[i] = heap[child];
        i = child;
    }
    if (n > 0)
        heap[i] = last;
    PyObject *when = PyFloat_FromDouble(first.when);
    if (when == NULL) {
        Py_DECREF(first.event);
        return NULL;
    }
    PyObject *out = PyTuple_New(2);
    if (out == NULL) {
        Py_DECREF(when);
        Py_DECREF(first.event);
        return NULL;
    }
    PyTuple_SET_ITEM(out, 0, when);
    PyTuple_SET_ITEM(out, 1, first.event);   /* the queue's reference passes to the tuple */
    return out;
}

static PyObject *next_time(EventQueue *self, PyObject *Py_UNUSED(ignored)) {
    if (self->len == 0) {
        PyErr_SetString(PyExc_IndexError, "an empty event queue has no next time");
        return NULL;
    }
    return PyFloat_FromDouble(self->heap[0].when);
}

static Py_ssize_t length(EventQueue *self) {
    return self->len;
}

static PyObject *new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (PyTuple_GET_SIZE(args) || (kwargs && PyDict_GET_SIZE(kwargs))) {
        PyErr_SetString(PyExc_TypeError, "EventQueue() takes no arguments");
        return NULL;
    }
    EventQueue *self = (EventQueue *)type->tp_alloc(type, 0);   /* zeroed: empty, nothing pushed */
    return (PyObject *)self;
}

static int traverse(EventQueue *self, visitproc visit, void *arg) {
    for (Py_ssize_t i = 0; i < self->len; i++)
        Py_VISIT(self->heap[i].event);
    return 0;
}

static int clear(EventQueue *self) {
    Py_ssize_t n = self->len;
    self->len = 0;                           /* empty before the events go: their finalizers may look */
    for (Py_ssize_t i = 0; i < n; i++)
        Py_DECREF(self->heap[i].event);
    return 0;
}

static void dealloc(EventQueue *self) {
    PyObject_GC_UnTrack(self);
    clear(self);
    PyMem_Free(self->heap);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef queue_methods[] = {
    {"push", (PyCFunction)(void (*)(void))push, METH_FASTCALL,
     "push(when, priority, event): add event at simulated time when (lower priority first among equal times)"},
    {"pop", (PyCFunction)pop, METH_NOARGS, "pop() -> (time, event): take the first event off the queue"},
    {"next_time", (PyCFunction)next_time, METH_NOARGS, "next_time() -> the time of the first event"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods queue_sequence = {.sq_length = (lenfunc)length};

static PyTypeObject EventQueueType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kvplan.sim.eventqueue.EventQueue",
    .tp_doc = "Events to come; pop takes the first: the earliest, then the lowest priority, then the first pushed.",
    .tp_basicsize = sizeof(EventQueue),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = new,
    .tp_dealloc = (destructor)dealloc,
    .tp_traverse = (traverseproc)traverse,
    .tp_clear = (inquiry)clear,
    .tp_methods = queue_methods,
    .tp_as_sequence = &queue_sequence,
};

static struct PyModuleDef eventqueue_module = {
    PyModuleDef_HEAD_INIT, "kvplan.sim.eventqueue",
    "The simulated clock's queue of events to come, in C (the twin of eventqueue.py).", -1, NULL, NULL, NULL, NULL,
    NULL,
};

PyMODINIT_FUNC PyInit_eventqueue(void) {
    if (PyType_Ready(&EventQueueType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&eventqueue_module);
    if (module == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "EventQueue", (PyObject *)&EventQueueType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
