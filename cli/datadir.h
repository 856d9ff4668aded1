/* datadir.h — where the files installed with specd are: the web pages (with
 * the chart library under vendor/uplot/) that `specd serve` serves when no
 * --web-root or server.web_root says otherwise, and the data files of
 * cli/data/. */
#ifndef SPECD_CLI_DATADIR_H
#define SPECD_CLI_DATADIR_H

#include <stddef.h>

/* Writes the path of the data file `name` installed with specd (from
 * cli/data/: prompts.txt, the default prompts of `specd bench
 * --concurrency`), looked up as the pages are: the build tree's
 * cli/data/NAME, else BINDIR/../DATADIR/specd/NAME, else DATADIR/specd/NAME.
 * Returns 0, or -1 with out listing the paths tried. */
int cli_data_file(const char *name, char *out, size_t len);

/* Writes the default web root into out (len bytes) and returns 0, or returns
 * -1 with out listing the folders tried. The binary of a meson build tree
 * serves its source tree's web/ (edits show on reload); an installed binary
 * serves BINDIR/../DATADIR/specd/web found from its own path
 * (/proc/self/exe: a `meson install --destdir` tree works as installed), else
 * the compiled-in DATADIR/specd/web. A folder counts when it holds
 * index.html. Any thread; no allocation. */
int cli_default_web_root(char *out, size_t len);

#endif
