"""bkaudit.bookie"""
