/*
 * lakesink: a Delta log store for S3 whose commits are conditional creates.
 *
 * Licensed under the Apache License, Version 2.0.
 */

package io.lakesink.storage;

import java.io.ByteArrayOutputStream;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Arrays;
import java.util.Iterator;

import io.delta.storage.HadoopFileSystemLogStore;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.IOUtils;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A Delta {@code LogStore} for S3 (through S3A) that writes {@code _delta_log/N.json} with S3's
 * conditional create ({@code If-None-Match: *}), so that of two writers committing version N,
 * from any number of JVMs or hosts, exactly one wins and the other gets
 * {@link FileAlreadyExistsException}, which Delta's transaction retries on (checking for
 * conflicts, then committing as N+1).
 *
 * <p>Delta's default for S3, {@code S3SingleDriverLogStore}, checks for N.json and then PUTs
 * it, under a lock inside one JVM only: a second driver can PUT between the check and the PUT
 * and silently replace a commit. Here the store decides: S3A (Hadoop 3.4.2+) sends the PUT of
 * {@code createFile(path).must("fs.option.create.conditional.overwrite", true)} with
 * {@code If-None-Match: *}, and a 412 surfaces from {@code close()}.
 *
 * <p>A conditional PUT that S3A retried after a lost response may find the object its own
 * first attempt created; after any failure the stored object is therefore read back, and if it
 * holds exactly this commit's bytes the write succeeded. Delta's commit JSON carries a
 * timestamp and a transaction id, so two different commits are never byte-identical.
 *
 * <p>Reading, listing and path resolution are Hadoop's, as in Delta's other log stores; S3
 * lists consistently since 2020, and a PUT is never partly visible.
 */
public class S3ConditionalLogStore extends HadoopFileSystemLogStore {

    /** The Hadoop createFile() option that makes S3A send If-None-Match: *. */
    public static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";

    /** How often a write is tried again after S3 answered 409 (another conditional write to
     * the same key was in flight and its outcome was not yet known). */
    private static final int CONFLICT_ATTEMPTS = 5;
    private static final long CONFLICT_BACKOFF_MILLIS = 100L;

    private static final Logger LOG = LoggerFactory.getLogger(S3ConditionalLogStore.class);

    public S3ConditionalLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(
            Path path,
            Iterator<String> actions,
            Boolean overwrite,
            Configuration hadoopConf) throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        // Encoded before any request, so a failure while producing the actions can never leave
        // a partial commit behind (S3A uploads on close() whatever was written).
        byte[] body = encode(actions);
        if (overwrite) {
            try (FSDataOutputStream out = fs.create(path, true)) {
                out.write(body);
            }
            return;
        }
        for (int attempt = 1; ; attempt++) {
            IOException failure;
            try {
                createConditionally(fs, path, body);
                return;
            } catch (IOException e) {
                failure = e;
            }
            byte[] stored;
            try {
                stored = readIfPresent(fs, path);
            } catch (IOException unreadable) {
                failure.addSuppressed(unreadable);
                throw failure;
            }
            if (stored != null) {
                if (Arrays.equals(stored, body)) {
                    LOG.info("{} holds this commit already (a retried conditional PUT): {}",
                            path, failure.toString());
                    return;
                }
                FileAlreadyExistsException exists =
                        new FileAlreadyExistsException(path.toString());
                exists.initCause(failure);
                throw exists;
            }
            if (!isConflict(failure) || attempt >= CONFLICT_ATTEMPTS) {
                throw failure;
            }
            LOG.warn("conditional create of {} answered 409 (attempt {} of {}); trying again",
                    path, attempt, CONFLICT_ATTEMPTS);
            pause(CONFLICT_BACKOFF_MILLIS * attempt);
        }
    }

    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false;
    }

    private static void createConditionally(FileSystem fs, Path path, byte[] body)
            throws IOException {
        FSDataOutputStream out;
        try {
            FSDataOutputStreamBuilder<?, ?> builder = fs.createFile(path);
            builder.overwrite(false);
            builder.must(CONDITIONAL_CREATE, true);
            out = builder.build();
        } catch (IllegalArgumentException | UnsupportedOperationException e) {
            throw new UnsupportedOperationException(
                    "the file system of " + path + " (" + fs.getClass().getName() + ") cannot "
                    + "create a file conditionally (" + CONDITIONAL_CREATE + "); lakesink's "
                    + "log store needs S3A of Hadoop 3.4.2 or later (hadoop-aws)", e);
        }
        boolean written = false;
        try {
            out.write(body);
            written = true;
        } finally {
            if (!written) {
                // Abort, not close: close() would upload whatever reached the buffer.
                out.abort();
            }
        }
        out.close();
    }

    private static byte[] encode(Iterator<String> actions) {
        ByteArrayOutputStream buffer = new ByteArrayOutputStream();
        while (actions.hasNext()) {
            byte[] line = (actions.next() + "\n").getBytes(StandardCharsets.UTF_8);
            buffer.write(line, 0, line.length);
        }
        return buffer.toByteArray();
    }

    /** The bytes stored at {@code path}, or null if there is no object there. */
    private static byte[] readIfPresent(FileSystem fs, Path path) throws IOException {
        ByteArrayOutputStream buffer = new ByteArrayOutputStream();
        try (FSDataInputStream in = fs.open(path)) {
            IOUtils.copyBytes(in, buffer, 64 * 1024, false);
        } catch (FileNotFoundException e) {
            return null;
        }
        return buffer.toByteArray();
    }

    /** Whether S3 answered 409 anywhere in the cause chain (AWSServiceIOException and the SDK's
     * AwsServiceException both have statusCode(); hadoop-aws is not on the compile path). */
    private static boolean isConflict(Throwable failure) {
        for (Throwable t = failure; t != null; t = t.getCause()) {
            try {
                Method statusCode = t.getClass().getMethod("statusCode");
                Object status = statusCode.invoke(t);
                if (status instanceof Integer && (Integer) status == 409) {
                    return true;
                }
            } catch (ReflectiveOperationException | RuntimeException ignored) {
                // not a service exception
            }
            if (t.getCause() == t) {
                break;
            }
        }
        return false;
    }

    private static void pause(long millis) throws InterruptedIOException {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            InterruptedIOException interrupted = new InterruptedIOException(
                    "interrupted while retrying a conditional create");
            interrupted.initCause(e);
            throw interrupted;
        }
    }
}
