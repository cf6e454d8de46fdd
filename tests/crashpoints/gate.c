/* The crash-point gate: every durable change under a lake asks the harness first.
 *
 * Loaded into every process of a scenario with LD_PRELOAD (the Python side, the Spark
 * driver JVM it starts, anything they start), it wraps the C library calls that change
 * what a lake holds: a file created or truncated under its final name (open, creat;
 * the change lasts until its close), a rename or link into place, a deletion (unlink,
 * remove). Before the call runs it tells the harness ("B op existed path": whether the
 * path existed then) and waits for its answer; once the call returned (for a file written
 * in place: once it is closed) it tells it again ("A op errno path") and waits again. The harness kills the whole
 * process tree instead of answering, so a kill "before" a change leaves it undone and a
 * kill "after" it leaves it done, exactly, whatever the kill's own latency.
 *
 * Temporary names (Hadoop's and lakesink's ".name.<id>.tmp", object_store's "name#n") and
 * Hadoop's ".name.crc" side files are passed through: the rename or link that puts a
 * temporary file in place is the change. Without CRASH_POINT_GATE and CRASH_POINT_ROOT in
 * the environment every call is passed through.
 *
 * Each thread talks to the harness on a connection of its own, so that answers never
 * cross; the harness orders the changes of all processes one at a time.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_FDS 65536

static __thread int gate_fd = -1;
static __thread pid_t gate_pid = 0;
static char *in_place[MAX_FDS]; /* files written in place under their final name, by fd */

static const char *root(void) {
    static const char *value = NULL;
    static int read_once = 0;
    if (!read_once) {
        value = getenv("CRASH_POINT_ROOT");
        read_once = 1;
    }
    return value;
}

static int temporary(const char *name) {
    size_t n = strlen(name);
    if (name[0] == '.') {
        /* ".name.<id>.tmp" and ".name.crc" */
        if (n > 4 && strcmp(name + n - 4, ".tmp") == 0) return 1;
        if (n > 4 && strcmp(name + n - 4, ".crc") == 0) return 1;
        return 0;
    }
    const char *hash = strrchr(name, '#');
    if (hash != NULL && hash[1] != '\0') {
        for (const char *c = hash + 1; *c; c++)
            if (*c < '0' || *c > '9') return 0;
        return 1;
    }
    return 0;
}

/* The absolute path of (dirfd, path) if it lies under the lake and is not temporary. */
static int gated(int dirfd, const char *path, char *out) {
    const char *lake = root();
    if (lake == NULL || path == NULL || getenv("CRASH_POINT_GATE") == NULL) return 0;
    char joined[2 * PATH_MAX];
    if (path[0] == '/') {
        snprintf(joined, sizeof joined, "%s", path);
    } else {
        char base[PATH_MAX];
        if (dirfd == AT_FDCWD) {
            if (getcwd(base, sizeof base) == NULL) return 0;
        } else {
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
            ssize_t len = readlink(link, base, sizeof base - 1);
            if (len < 0) return 0;
            base[len] = '\0';
        }
        snprintf(joined, sizeof joined, "%s/%s", base, path);
    }
    size_t n = strlen(lake);
    if (strncmp(joined, lake, n) != 0 || joined[n] != '/') return 0;
    const char *slash = strrchr(joined, '/');
    if (temporary(slash + 1)) return 0;
    snprintf(out, PATH_MAX, "%s", joined + n + 1);
    return 1;
}

static int gate_connect(void) {
    pid_t pid = getpid();
    if (gate_fd >= 0 && gate_pid == pid) return gate_fd;
    const char *address = getenv("CRASH_POINT_GATE");
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_un where = {.sun_family = AF_UNIX};
    snprintf(where.sun_path, sizeof where.sun_path, "%s", address);
    if (connect(fd, (struct sockaddr *)&where, sizeof where) != 0) {
        int (*real_close)(int) = dlsym(RTLD_NEXT, "close");
        real_close(fd);
        return -1;
    }
    gate_fd = fd;
    gate_pid = pid;
    return fd;
}

/* Tell the harness and wait for its answer; a harness that is gone lets the call run. */
static void ask(char phase, const char *op, const char *path, long value) {
    int saved = errno;
    int fd = gate_connect();
    if (fd >= 0) {
        char line[PATH_MAX + 64];
        int n = snprintf(line, sizeof line, "%c %s %ld %s\n", phase, op, value, path);
        if (write(fd, line, (size_t)n) == n) {
            char answer;
            while (read(fd, &answer, 1) < 0 && errno == EINTR) {
            }
        }
    }
    errno = saved;
}

/* The C library's own ``name``, found once. */
static int exists_at(int dirfd, const char *name) {
    struct stat info;
    return fstatat(dirfd, name, &info, AT_SYMLINK_NOFOLLOW) == 0;
}

/* A rename onto an existing name replaces it: an overwrite. */
#define RENAME_OP(dirfd, name) (exists_at(dirfd, name) ? "replace" : "rename")

/* Runs ``call`` between the harness's two answers (before it runs, once it returned) and
 * returns its result. */
#define THROUGH_GATE(op, path, existed, call)             \
    do {                                                  \
        ask('B', (op), (path), (existed));                \
        int result_ = (call);                             \
        ask('A', (op), (path), result_ == 0 ? 0 : errno); \
        return result_;                                   \
    } while (0)

#define REAL(name)                                   \
    static __typeof__(&name) real_##name = NULL;     \
    if (real_##name == NULL) real_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name)

int rename(const char *from, const char *to) {
    REAL(rename);
    char path[PATH_MAX];
    if (!gated(AT_FDCWD, to, path)) return real_rename(from, to);
    const char *op = RENAME_OP(AT_FDCWD, to);
    THROUGH_GATE(op, path, strcmp(op, "replace") == 0, real_rename(from, to));
}

int renameat(int fromfd, const char *from, int tofd, const char *to) {
    REAL(renameat);
    char path[PATH_MAX];
    if (!gated(tofd, to, path)) return real_renameat(fromfd, from, tofd, to);
    const char *op = RENAME_OP(tofd, to);
    THROUGH_GATE(op, path, strcmp(op, "replace") == 0, real_renameat(fromfd, from, tofd, to));
}

int renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned int flags) {
    REAL(renameat2);
    char path[PATH_MAX];
    if (!gated(tofd, to, path)) return real_renameat2(fromfd, from, tofd, to, flags);
    const char *op = RENAME_OP(tofd, to);
    THROUGH_GATE(op, path, strcmp(op, "replace") == 0, real_renameat2(fromfd, from, tofd, to, flags));
}

int link(const char *from, const char *to) {
    REAL(link);
    char path[PATH_MAX];
    if (!gated(AT_FDCWD, to, path)) return real_link(from, to);
    THROUGH_GATE("link", path, exists_at(AT_FDCWD, to), real_link(from, to));
}

int linkat(int fromfd, const char *from, int tofd, const char *to, int flags) {
    REAL(linkat);
    char path[PATH_MAX];
    if (!gated(tofd, to, path)) return real_linkat(fromfd, from, tofd, to, flags);
    THROUGH_GATE("link", path, exists_at(tofd, to), real_linkat(fromfd, from, tofd, to, flags));
}

int unlink(const char *name) {
    REAL(unlink);
    char path[PATH_MAX];
    if (!gated(AT_FDCWD, name, path)) return real_unlink(name);
    THROUGH_GATE("delete", path, exists_at(AT_FDCWD, name), real_unlink(name));
}

int unlinkat(int dirfd, const char *name, int flags) {
    REAL(unlinkat);
    char path[PATH_MAX];
    /* A folder's removal changes no table: only files are changes. */
    if ((flags & AT_REMOVEDIR) || !gated(dirfd, name, path))
        return real_unlinkat(dirfd, name, flags);
    THROUGH_GATE("delete", path, exists_at(dirfd, name), real_unlinkat(dirfd, name, flags));
}

int remove(const char *name) {
    REAL(remove);
    char path[PATH_MAX];
    struct stat info;
    if (!gated(AT_FDCWD, name, path) || stat(name, &info) != 0 || S_ISDIR(info.st_mode))
        return real_remove(name);
    THROUGH_GATE("delete", path, 1, real_remove(name));
}

/* A file opened to be written under its final name: created, or an existing one
 * truncated (an overwrite). The change is done once the file is closed. */
static int opened(int dirfd, const char *name, int flags, mode_t mode,
                  int (*call)(int, const char *, int, mode_t)) {
    char path[PATH_MAX];
    if (!(flags & (O_CREAT | O_TRUNC)) || (flags & O_ACCMODE) == O_RDONLY ||
        !gated(dirfd, name, path))
        return call(dirfd, name, flags, mode);
    struct stat info;
    int exists = fstatat(dirfd, name, &info, 0) == 0;
    if (exists && !(flags & O_TRUNC)) return call(dirfd, name, flags, mode);
    const char *op = exists ? "overwrite" : "create";
    ask('B', op, path, exists);
    int fd = call(dirfd, name, flags, mode);
    if (fd < 0 || fd >= MAX_FDS) {
        ask('A', op, path, fd < 0 ? errno : 0);
        return fd;
    }
    size_t n = strlen(path) + strlen(op) + 2;
    in_place[fd] = malloc(n);
    if (in_place[fd] != NULL) snprintf(in_place[fd], n, "%s %s", op, path);
    return fd;
}

static int via_openat(int dirfd, const char *name, int flags, mode_t mode) {
    REAL(openat);
    return real_openat(dirfd, name, flags, mode);
}

static int via_openat64(int dirfd, const char *name, int flags, mode_t mode) {
    REAL(openat64);
    return real_openat64(dirfd, name, flags, mode);
}

static mode_t mode_of(int flags, va_list args) {
    int wanted = (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
    return wanted ? (mode_t)va_arg(args, int) : 0;
}

int open(const char *name, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = mode_of(flags, args);
    va_end(args);
    return opened(AT_FDCWD, name, flags, mode, via_openat);
}

int open64(const char *name, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = mode_of(flags, args);
    va_end(args);
    return opened(AT_FDCWD, name, flags, mode, via_openat64);
}

int openat(int dirfd, const char *name, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = mode_of(flags, args);
    va_end(args);
    return opened(dirfd, name, flags, mode, via_openat);
}

int openat64(int dirfd, const char *name, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = mode_of(flags, args);
    va_end(args);
    return opened(dirfd, name, flags, mode, via_openat64);
}

int creat(const char *name, mode_t mode) {
    return opened(AT_FDCWD, name, O_CREAT | O_WRONLY | O_TRUNC, mode, via_openat);
}

int creat64(const char *name, mode_t mode) {
    return opened(AT_FDCWD, name, O_CREAT | O_WRONLY | O_TRUNC, mode, via_openat64);
}

/* The change of a file written in place is done: tell the harness, after ``result``. */
static void written(char *pending, int result) {
    char *space = strchr(pending, ' ');
    *space = '\0';
    ask('A', pending, space + 1, result == 0 ? 0 : errno);
    free(pending);
}

static char *take(int fd) {
    if (fd < 0 || fd >= MAX_FDS) return NULL;
    char *pending = in_place[fd];
    in_place[fd] = NULL;
    return pending;
}

int close(int fd) {
    REAL(close);
    char *pending = take(fd);
    int result = real_close(fd);
    if (pending != NULL) written(pending, result);
    return result;
}

/* A descriptor replaced by another closes the file it named (the JVM closes so). */
int dup2(int from, int to) {
    REAL(dup2);
    char *pending = from == to ? NULL : take(to);
    int result = real_dup2(from, to);
    if (pending != NULL) written(pending, result < 0 ? -1 : 0);
    return result;
}

int dup3(int from, int to, int flags) {
    REAL(dup3);
    char *pending = take(to);
    int result = real_dup3(from, to, flags);
    if (pending != NULL) written(pending, result < 0 ? -1 : 0);
    return result;
}

/* A forked child shares none of its parent's changes in flight: closing its copies of
 * their descriptors changes nothing. */
static void forget_in_place(void) {
    memset(in_place, 0, sizeof in_place);
    gate_fd = -1;
}

__attribute__((constructor)) static void install(void) {
    pthread_atfork(NULL, NULL, forget_in_place);
}
