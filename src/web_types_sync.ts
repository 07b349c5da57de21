/**
 * `Memory.open`'s `sync` option (a build with the cargo feature `sync`; docs/SYNC.md): sync at open and then every
 * `everyMinutes` in the tab that leads; `memory.sync()` without options syncs with it too.
 */
export interface OpenOptions {
  sync?: SyncOptions & { everyMinutes?: number };
}

/** Where and how `memory.sync()` syncs: a WebDAV folder, and what unlocks the sync key. */
export interface SyncOptions {
  /** The folder's URL, or with the credentials its server asks for (sent as HTTP Basic, only to that server). */
  remote: string | { url: string; username?: string; password?: string };
  /** The sync passphrase, the same on every device (one of `passphrase` and `key`); never stored. */
  passphrase?: string;
  /** An AES-GCM `CryptoKey` the app holds, instead of a passphrase. */
  key?: CryptoKey;
  /** Cancels the sync between its steps (`ABORTED`); the next sync finishes what it left. */
  signal?: AbortSignal;
}

/** What one `memory.sync()` did. */
export interface SyncReport {
  /** Changes this device sent. */
  opsSent: number;
  /** Other devices' segments merged. */
  segmentsReceived: number;
  /** Turns of other devices stored here. */
  turnsAdded: number;
  /** Turns here that another device forgot. */
  turnsForgotten: number;
  /** Sessions put in the merged order from some turn on (their units embedded again). */
  sessionsRewritten: number;
  /** Episodes and facts put or deleted. */
  derivedChanged: number;
}

/** `onProgress` during a sync: `"sending"` (with `ops`), `"receiving"`, `"done"` (with its `report`), or a background
 * sync's `error` (the next one tries again). Relayed to every tab of the memory. */
export interface SyncProgressEvent {
  phase: "sync";
  detail?: "sending" | "receiving" | "done";
  ops?: number;
  report?: SyncReport;
  error?: LociError;
}

/** `sync()` without options uses the open's `sync` option (declarations merge into the class). */
export interface Memory {
  sync(options?: SyncOptions): Promise<SyncReport>;
}
