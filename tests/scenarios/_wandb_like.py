"""A W&B-style run (used by the wandb scenarios): ``log`` rolls data into the pending history row,
which is committed (serialized and handed to the sender, then dropped) when ``commit=True``, or when
an explicit ``step`` is larger than the current one; with an explicit step and no ``commit`` the row
stays pending, as ``wandb.log(data, step=N)`` does."""
import pickle


class Run:
    def __init__(self):
        self._step = 0
        self._pending = {}
        self.sent_bytes = 0

    def log(self, data, step=None, commit=None):
        if step is not None and step > self._step:
            self._commit()
            self._step = step
        self._pending.update(data)
        if commit or (commit is None and step is None):
            self._commit()
            self._step += 1

    def _commit(self):
        if self._pending:
            self.sent_bytes += len(pickle.dumps({"_step": self._step, **self._pending}))
        self._pending = {}
