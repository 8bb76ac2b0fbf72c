/* interrupt.h: SIGINT / SIGTERM while a command starts up.
 *
 * Loading a model (engine_open: the checkpoint, the memory plan, the ranks)
 * takes seconds to minutes and looks at no flag, so a command's own "stop
 * after the current step" handler would be heard only once the load is
 * over, and a second Ctrl-C, killing by default, would leave the command's
 * temporary output behind.  Until the command installs its own handler,
 * interrupt_at_start ends the process at once instead: the temporary output
 * removed, one line saying what was stopped, exit status 128 + the signal
 * (as a shell reports a process the signal killed). */
#ifndef RL_INTERRUPT_H
#define RL_INTERRUPT_H

/* cmd names the command in the line ("generate"); tmp is a temporary file
 * to remove (files.h's rlOutFile.tmp, kept valid until the command replaces
 * the handler) or NULL; kept is said after the line's "interrupted (SIGINT)
 * while starting: " ("nothing was run"). */
void interrupt_at_start(const char *cmd, const char *tmp, const char *kept);

#endif
