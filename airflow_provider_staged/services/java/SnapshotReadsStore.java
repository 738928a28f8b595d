package org.apache.hadoop.hive.metastore;

import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.locks.ReentrantReadWriteLock;

import org.apache.hadoop.hive.metastore.api.InvalidInputException;
import org.apache.hadoop.hive.metastore.api.InvalidObjectException;
import org.apache.hadoop.hive.metastore.api.MetaException;
import org.apache.hadoop.hive.metastore.api.NoSuchObjectException;
import org.apache.hadoop.hive.metastore.api.Partition;
import org.apache.hadoop.hive.metastore.api.Table;
import org.apache.hadoop.hive.metastore.partition.spec.PartitionSpecProxy;
import org.apache.thrift.TException;

/**
 * Hive 2.3's ObjectStore whose table reads and partition listings never see half of a write.
 *
 * <p>Derby has no snapshots: its read-committed scan of a table's partitions can read some rows
 * before a multi-partition write, wait on a row the write holds, and read the rest after it
 * commits (an old prefix and a new suffix). A scan that meets a dropped partition's half-deleted
 * rows returns it without its values, or fails. A table read is several statements: it can join
 * the location of one {@code alter_table} to the parameters (schema, revision) of the next.
 * Repeatable-read would hold the scans' locks, but DataNucleus's non-transactional reads break
 * under it in Hive 2.3. An embedded Derby database is open in one JVM only, so a JVM-wide
 * read/write lock is exact: a table read or partition listing that is not part of a write holds
 * the read side for its call, and a write ({@code alterTable}, the compare-and-set's
 * {@code updateParameterWithExpectedValue}, {@code dropTable}, {@code alterPartition(s)},
 * {@code addPartition(s)}, {@code dropPartition(s)}) takes the write side until its enclosing
 * transaction ends (the handlers commit after these methods return). Reads inside a transaction
 * (a write's own reads) take no lock: they may hold row locks that the lock holder waits for,
 * and they need no snapshot.
 */
public class SnapshotReadsStore extends ObjectStore {
  private static final ReentrantReadWriteLock SWITCH = new ReentrantReadWriteLock(true);

  private boolean holdsSwitch;

  @SuppressWarnings("unchecked")
  private static <E extends Exception> RuntimeException rethrow(Exception e) throws E {
    throw (E) e;  // the store call's own checked exceptions pass through unchanged
  }

  /** {@code lookup} under the read side, unless it is part of a transaction (see above). */
  private <T> T read(Callable<T> lookup) {
    boolean outsideWrite = !isActiveTransaction();
    if (outsideWrite) {
      SWITCH.readLock().lock();
    }
    try {
      return lookup.call();
    } catch (Exception e) {
      throw SnapshotReadsStore.<RuntimeException>rethrow(e);
    } finally {
      if (outsideWrite) {
        SWITCH.readLock().unlock();
      }
    }
  }

  private void releaseSwitchIfDone() {
    if (holdsSwitch && !isActiveTransaction()) {
      holdsSwitch = false;
      SWITCH.writeLock().unlock();
    }
  }

  /** {@code change} under the write side, held until its enclosing transaction ends. */
  private <T> T write(Callable<T> change) {
    if (!holdsSwitch) {
      SWITCH.writeLock().lock();
      holdsSwitch = true;
    }
    try {
      return change.call();
    } catch (Exception e) {
      throw SnapshotReadsStore.<RuntimeException>rethrow(e);
    } finally {
      releaseSwitchIfDone();  // called outside a transaction: it committed or rolled back itself
    }
  }

  @Override
  public void alterPartitions(String db, String table, List<List<String>> values, List<Partition> parts)
      throws InvalidObjectException, MetaException {
    write(() -> {
      super.alterPartitions(db, table, values, parts);
      return null;
    });
  }

  @Override
  public void alterPartition(String db, String table, List<String> values, Partition part)
      throws InvalidObjectException, MetaException {
    write(() -> {
      super.alterPartition(db, table, values, part);
      return null;
    });
  }

  @Override
  public boolean addPartitions(String db, String table, List<Partition> parts)
      throws InvalidObjectException, MetaException {
    return write(() -> super.addPartitions(db, table, parts));
  }

  @Override
  public boolean addPartitions(String db, String table, PartitionSpecProxy parts, boolean ifNotExists)
      throws InvalidObjectException, MetaException {
    return write(() -> super.addPartitions(db, table, parts, ifNotExists));
  }

  @Override
  public boolean addPartition(Partition part) throws InvalidObjectException, MetaException {
    return write(() -> super.addPartition(part));
  }

  @Override
  public boolean dropPartition(String db, String table, List<String> values)
      throws MetaException, NoSuchObjectException, InvalidObjectException, InvalidInputException {
    return write(() -> super.dropPartition(db, table, values));
  }

  @Override
  public void dropPartitions(String db, String table, List<String> names)
      throws MetaException, NoSuchObjectException {
    write(() -> {
      super.dropPartitions(db, table, names);
      return null;
    });
  }

  @Override
  public long updateParameterWithExpectedValue(Table table, String key, String expected, String value)
      throws MetaException, NoSuchObjectException {
    // A compare-and-set alter's first write (HIVE-26882), before alterTable in its transaction.
    return write(() -> super.updateParameterWithExpectedValue(table, key, expected, value));
  }

  @Override
  public void alterTable(String db, String table, Table changed) throws InvalidObjectException, MetaException {
    write(() -> {
      super.alterTable(db, table, changed);
      return null;
    });
  }

  @Override
  public boolean dropTable(String db, String table)
      throws MetaException, NoSuchObjectException, InvalidObjectException, InvalidInputException {
    return write(() -> super.dropTable(db, table));
  }

  @Override
  public boolean commitTransaction() {
    try {
      return super.commitTransaction();
    } finally {
      releaseSwitchIfDone();
    }
  }

  @Override
  public void rollbackTransaction() {
    try {
      super.rollbackTransaction();
    } finally {
      releaseSwitchIfDone();
    }
  }

  @Override
  public Table getTable(String db, String table) throws MetaException {
    return read(() -> super.getTable(db, table));
  }

  @Override
  public List<Partition> getPartitions(String db, String table, int max)
      throws MetaException, NoSuchObjectException {
    return read(() -> super.getPartitions(db, table, max));
  }

  @Override
  public List<Partition> getPartitionsWithAuth(String db, String table, short max, String user, List<String> groups)
      throws MetaException, InvalidObjectException {
    return read(() -> super.getPartitionsWithAuth(db, table, max, user, groups));
  }

  @Override
  public List<Partition> listPartitionsPsWithAuth(String db, String table, List<String> values, short max,
      String user, List<String> groups) throws MetaException, InvalidObjectException, NoSuchObjectException {
    return read(() -> super.listPartitionsPsWithAuth(db, table, values, max, user, groups));
  }

  @Override
  public List<Partition> getPartitionsByNames(String db, String table, List<String> names)
      throws MetaException, NoSuchObjectException {
    return read(() -> super.getPartitionsByNames(db, table, names));
  }

  @Override
  public List<Partition> getPartitionsByFilter(String db, String table, String filter, short max)
      throws MetaException, NoSuchObjectException {
    return read(() -> super.getPartitionsByFilter(db, table, filter, max));
  }

  @Override
  public boolean getPartitionsByExpr(String db, String table, byte[] expr, String defaultPartitionName,
      short max, List<Partition> result) throws TException {
    return read(() -> super.getPartitionsByExpr(db, table, expr, defaultPartitionName, max, result));
  }
}
