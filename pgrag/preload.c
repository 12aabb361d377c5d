/*
 * pgrag_preload: PL/Python's interpreter started once, in the postmaster, with
 * pgrag already imported, so that every backend forks with it (pgrag/preload.py).
 *
 * PL/Python starts Python lazily in each backend; a fresh connection's first
 * pgrag call then pays for importing numpy, scipy and pgrag (about 300 ms on
 * two cores). Listed in shared_preload_libraries, this library does that work
 * once: it starts the interpreter the way PL/Python would (with the plpy module
 * registered first), runs pgrag.preload.in_postmaster(), and asks Python to
 * reinitialise its per-process state in every forked child (the at-fork
 * handlers that reseed `random`, among others). A backend's PL/Python then finds
 * the interpreter running: Py_Initialize is a no-op and the imports are in
 * sys.modules, shared copy-on-write with the postmaster.
 *
 * Python 3.12 made PyImport_AppendInittab after Py_Initialize a fatal error,
 * and PL/Python calls it in every backend: this library refuses to build there.
 */
#include <Python.h>

#include "postgres.h"

#include <pthread.h>

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#if PY_VERSION_HEX >= 0x030C0000
#error "pgrag_preload needs Python < 3.12 (PL/Python registers plpy after this library has started Python)"
#endif

PG_MODULE_MAGIC;

void _PG_init(void);

static char *python_path = NULL;

static void before_fork(void) { PyOS_BeforeFork(); }
static void after_fork_in_parent(void) { PyOS_AfterFork_Parent(); }
static void after_fork_in_child(void) { PyOS_AfterFork_Child(); }

/* sys.path gets pgrag.python_path's entries; then pgrag warms the interpreter. */
static const char *const WARM =
	"import sys\n"
	"sys.path[0:0] = [p for p in _pgrag_path.split(':') if p and p not in sys.path]\n"
	"del _pgrag_path\n"
	"import pgrag.preload\n"
	"pgrag.preload.in_postmaster()\n";

void
_PG_init(void)
{
	PyObject   *(*init_plpy) (void);
	PyObject   *globals;
	PyObject   *path;
	PyObject   *result;

	if (!process_shared_preload_libraries_in_progress || Py_IsInitialized())
		return;
	DefineCustomStringVariable("pgrag.python_path",
							   "Where the postmaster's Python imports pgrag from (colon-separated).",
							   NULL, &python_path, "", PGC_POSTMASTER, 0, NULL, NULL, NULL);

	/* Loading plpython3 runs its _PG_init (its version check); plpy is registered as PL/Python would. */
	init_plpy = (PyObject *(*) (void)) load_external_function("$libdir/plpython3", "PyInit_plpy", true, NULL);
	if (PyImport_AppendInittab("plpy", init_plpy) != 0)
		elog(FATAL, "pgrag_preload: could not register the plpy module");
	Py_Initialize();

	globals = PyModule_GetDict(PyImport_AddModule("__main__"));
	path = PyUnicode_FromString(python_path);
	PyDict_SetItemString(globals, "_pgrag_path", path);
	Py_XDECREF(path);
	result = PyRun_String(WARM, Py_file_input, globals, globals);
	if (result == NULL)
	{
		/*
		 * The server still starts: each backend then imports pgrag itself, as
		 * without this library, and finds none of a half-done import.
		 */
		PyErr_Print();
		PyRun_SimpleString("import sys\n"
						   "for _m in [m for m in sys.modules if m == 'pgrag' or m.startswith('pgrag.')]:\n"
						   "    del sys.modules[_m]\n");
		elog(WARNING, "pgrag_preload: importing pgrag in the postmaster failed (traceback above); "
			 "backends will import it on their first call");
	}
	else
		elog(LOG, "pgrag_preload: Python %.*s started with pgrag imported",
			 (int) strcspn(Py_GetVersion(), " "), Py_GetVersion());
	Py_XDECREF(result);

	pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
}
