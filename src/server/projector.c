/* Which vision projector a served model gets (server_internal.h: server_model_projector), in one place for
 * the one-model server and each model of a server of several. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/vision.h"
#include "server/server_internal.h"

bool server_is_mmproj_name(const char *name) {
    size_t n = strlen(name);
    return n >= 6 + 5 && !strncmp(name, "mmproj", 6) && !strcmp(name + n - 5, ".gguf");
}

static int only_mmproj(const struct dirent *de) { return de->d_name[0] != '.' && server_is_mmproj_name(de->d_name); }

/* The one projector file in dir (*out malloc'd, NULL when there is none); two or more are an error naming
 * them, for the model's load to fail with. */
static int dir_projector(const char *dir, char **out, pith_err *err) {
    struct dirent **entries = NULL;
    int n = scandir(dir, &entries, only_mmproj, alphasort);
    if (n < 0) return 0; /* not a directory we can read: the model's own load says why */
    char path[4096];
    int rc = 0, found = 0;
    char names[240] = "";
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        struct stat st;
        int w = snprintf(path, sizeof path, "%s/%s", dir, entries[i]->d_name);
        if (w > 0 && w < (int)sizeof path && !stat(path, &st) && S_ISREG(st.st_mode)) {
            if (!found++ && !(*out = strdup(path))) rc = pith_errf(err, "out of memory");
            if (len < sizeof names) {
                w = snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "", entries[i]->d_name);
                len = w < 0 ? sizeof names : len + (size_t)w;
            }
        }
        free(entries[i]);
    }
    free(entries);
    if (!rc && found > 1) {
        free(*out);
        *out = NULL;
        rc = pith_errf(err, "%.200s holds %d projector files (%s%s): keep one mmproj*.gguf beside the model", dir, found,
                       names, len >= sizeof names ? "..." : "");
    }
    return rc;
}

int server_model_projector(const char *model_path, const char *given, const char *dir, char **out, pith_err *err) {
    *out = NULL;
    if (given && *given) return (*out = strdup(given)) ? 0 : pith_errf(err, "out of memory");
    if (dir && *dir) {
        if (dir_projector(dir, out, err)) return -1;
        if (*out) return 0;
    }
    if (model_path && *model_path && pith_vision_in_model(model_path))
        return (*out = strdup(model_path)) ? 0 : pith_errf(err, "out of memory");
    return 0;
}
